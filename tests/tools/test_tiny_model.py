"""Tests for proxima_tools.tiny_model: the embedded tiny Llama default model."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("numpy")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from proxima_tools import tiny_model as tm  # noqa: E402  (after the importorskips)


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


# --------------------------------------------------------------------------
# build: files, determinism, reuse, atomicity
# --------------------------------------------------------------------------


def test_writes_expected_files(model_dir: Path) -> None:
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(tm.ALL_FILES)
    assert tm.is_complete(model_dir)


def test_two_builds_are_byte_identical(model_dir: Path, tmp_path: Path) -> None:
    other = tm.make_tiny_model(tmp_path / "again")
    assert _hashes(other) == _hashes(model_dir)


def test_reuse_without_force_and_rebuild_with_force(tmp_path: Path) -> None:
    out = tm.make_tiny_model(tmp_path / "m")
    good = _hashes(out)
    weights = out / "model.safetensors"
    mtime = weights.stat().st_mtime_ns

    assert tm.make_tiny_model(out) == out
    assert weights.stat().st_mtime_ns == mtime  # reused, not rewritten

    weights.write_bytes(b"corrupt")
    assert not tm.is_complete(out)
    with pytest.raises(FileExistsError, match="--force"):
        tm.make_tiny_model(out)

    tm.make_tiny_model(out, force=True)
    assert _hashes(out) == good
    # Atomic build leaves no temp or trash folders behind.
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mode & 0o777 for p in [folder, *folder.iterdir()]}


def test_files_are_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    """The images' nonroot user (another UID) must read every file: 0644, folder 0755, even
    with umask 077 and though safetensors writes the weights 0600."""
    old = os.umask(0o077)
    try:
        out = tm.make_tiny_model(tmp_path / "m")
    finally:
        os.umask(old)
    modes = _modes(out)
    assert modes.pop(out.name) == 0o755
    assert modes == dict.fromkeys(tm.ALL_FILES, 0o644)


def test_reuse_makes_an_older_build_readable(tmp_path: Path) -> None:
    out = tm.make_tiny_model(tmp_path / "m")
    weights = out / "model.safetensors"
    weights.chmod(0o600)  # as builds before the fix left it
    mtime = weights.stat().st_mtime_ns
    assert tm.make_tiny_model(out) == out
    assert weights.stat().st_mode & 0o777 == 0o644
    assert weights.stat().st_mtime_ns == mtime  # still reused, not rebuilt


def test_refuses_foreign_folder_without_force(tmp_path: Path) -> None:
    out = tmp_path / "not-a-model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        tm.make_tiny_model(out)
    assert (out / "keep.txt").read_text() == "mine"


def test_cli_builds_then_reuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert tm.main(["--out", str(out)]) == 0
    first = capsys.readouterr().out
    assert first.startswith("built ") and "model.safetensors" in first
    assert tm.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("reused existing ")
    assert tm.main(["--out", str(out), "--force"]) == 0
    assert capsys.readouterr().out.startswith("built ")


def test_cli_reports_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x").mkdir()
    assert tm.main(["--out", str(tmp_path / "x")]) == 1
    assert "--force" in capsys.readouterr().err


# --------------------------------------------------------------------------
# file contents (no torch needed)
# --------------------------------------------------------------------------


def test_config_json(model_dir: Path) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["torch_dtype"] == "float32"
    assert cfg["vocab_size"] == len(tok["model"]["vocab"])
    assert 1000 <= cfg["vocab_size"] <= 2000


def test_weights_shapes_and_muted_rows(model_dir: Path) -> None:
    import numpy as np
    from safetensors.numpy import load_file

    w = load_file(str(model_dir / "model.safetensors"))
    cfg = json.loads((model_dir / "config.json").read_text())
    v, h = cfg["vocab_size"], cfg["hidden_size"]
    assert all(a.dtype == np.float32 for a in w.values())
    assert len(w) == 3 + 9 * cfg["num_hidden_layers"]
    assert w["model.embed_tokens.weight"].shape == (v, h)
    assert w["lm_head.weight"].shape == (v, h)
    assert w["model.layers.0.self_attn.q_proj.weight"].shape == (4 * 32, h)
    assert w["model.layers.1.self_attn.k_proj.weight"].shape == (2 * 32, h)
    assert w["model.layers.1.mlp.down_proj.weight"].shape == (h, 256)
    norms = np.linalg.norm(w["lm_head.weight"], axis=1)
    # Special tokens (ids 0..6) are never generated: their rows are zero.
    assert np.all(norms[: len(tm.SPECIAL_TOKENS)] == 0)
    assert (norms > 0).sum() > 0.8 * v


# --------------------------------------------------------------------------
# transformers loading
# --------------------------------------------------------------------------


def test_auto_config_fields(model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(str(model_dir))
    assert cfg.model_type == "llama"
    assert cfg.architectures == ["LlamaForCausalLM"]
    assert cfg.hidden_size == 128
    assert cfg.num_hidden_layers == 2
    assert cfg.num_attention_heads == 4
    assert cfg.num_key_value_heads == 2
    assert cfg.head_dim == 32
    assert cfg.intermediate_size == 256
    assert cfg.max_position_embeddings == 4096
    assert cfg.tie_word_embeddings is False
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (1, 2, 3)
    dtype = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None)
    assert str(dtype).removeprefix("torch.") == "float32"
    rope: dict[str, Any] = getattr(cfg, "rope_parameters", None) or {}
    assert rope.get("rope_type", "default") == "default"
    assert float(rope.get("rope_theta", getattr(cfg, "rope_theta", 0.0))) == 10000.0


def test_tokenizer_round_trip_and_specials(model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    cfg = transformers.AutoConfig.from_pretrained(str(model_dir))
    assert len(tok) == cfg.vocab_size
    assert tok.model_max_length == 4096
    assert (tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token) == (
        "<s>",
        "</s>",
        "<unk>",
        "<pad>",
    )
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        cfg.bos_token_id,
        cfg.eos_token_id,
        cfg.pad_token_id,
    )
    for text in (
        "Hello world",
        "The quick brown fox jumps over the lazy dog.",
        "  leading spaces, tabs\tand\nnewlines",
        "Unicode: café, naïve, 東京, emoji 🙂, 5€",
        'def f(x):\n    return {"a": [1, 2.5]}',
    ):
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id  # Llama style BOS
        assert tok.eos_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    # Frequent corpus words are single tokens: the BPE really learned merges.
    assert len(tok(" the garden", add_special_tokens=False)["input_ids"]) == 2


def test_chat_template(model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<s><|system|>\nBe brief.</s>\n<|user|>\nHi there</s>\n"
        "<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n"
    )
    no_prompt = tok.apply_chat_template(messages, tokenize=False)
    assert text.startswith(no_prompt) and not no_prompt.endswith("<|assistant|>\n")
    enc = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = enc["input_ids"] if not isinstance(enc, list) else enc
    assert ids == tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.bos_token_id) == 1  # template's BOS, not doubled
    role_ids = tok.convert_tokens_to_ids(list(tm.ROLE_TOKENS))
    assert all(i in ids for i in role_ids)  # role markers are single tokens


def test_logits_are_peaky_and_continuations_varied(model_dir: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    stats = tm.measure_logits(model_dir, n_prompts=6, new_tokens=24, seed=1)
    assert stats.steps == 6 * 24
    assert stats.mean_gap >= 1.0
    assert stats.frac_gap_below_0_1 < 0.1
    assert stats.collapsed == 0
    assert stats.mean_distinct >= 16
    assert stats.sample.isascii()
    assert all(ch.isprintable() or ch in "\t\n" for ch in stats.sample)


def test_greedy_never_emits_muted_tokens(model_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32
    ).eval()
    muted = set(tm.muted_token_ids(tm.train_tokenizer()))
    assert {0, 1, 2, 3} <= muted
    ids = tok("Hello world", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=48,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    assert len(new) == 48  # no early EOS
    assert not muted.intersection(new)
    text = tok.decode(new)
    assert "\ufffd" not in text and text.isascii()
