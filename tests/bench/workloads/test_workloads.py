"""Tests for proxima_bench.workloads: seeded lengths and token-exact prompts."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    from proxima_bench import workloads as wl
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proxima-bench" / "src"))
    from proxima_bench import workloads as wl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------
# lengths (no tokenizer)
# --------------------------------------------------------------------------


def test_baseline_lengths_in_range_and_seeded() -> None:
    w = wl.make_workload("baseline")
    reqs = w.sample(5000, seed=0)
    prompts = np.array([r.prompt_len for r in reqs])
    outputs = np.array([r.output_len for r in reqs])
    assert prompts.min() == 50 and prompts.max() == 200  # both ends reachable
    assert outputs.min() == 32 and outputs.max() == 256
    assert prompts.mean() == pytest.approx(125, abs=3)
    assert outputs.mean() == pytest.approx(144, abs=4)
    assert w.sample(5000, seed=0) == reqs
    assert w.sample(5000, seed=1) != reqs


def test_sharegpt_lognormal_parameters_match_the_documented_means() -> None:
    w = wl.make_workload("sharegpt")
    assert isinstance(w, wl.ShareGPTLike)
    params = w.params()
    assert params["prompt"]["mean_unclipped"] == pytest.approx(161.31, abs=0.01)
    assert params["output"]["mean_unclipped"] == pytest.approx(337.99, abs=0.01)
    assert params["prompt"]["mu"] == pytest.approx(math.log(161.31) - 0.5, abs=1e-5)
    reqs = w.sample(50_000, seed=0)
    prompts = np.array([r.prompt_len for r in reqs])
    outputs = np.array([r.output_len for r in reqs])
    # Clipping at [4, 2048] / [4, 1024] trims the tails a little.
    assert 150 < prompts.mean() < 165
    assert 300 < outputs.mean() < 340
    assert np.median(prompts) == pytest.approx(98, abs=4)
    assert np.median(outputs) == pytest.approx(245, abs=8)
    assert prompts.min() >= 4 and prompts.max() <= 2048 and outputs.max() <= 1024


def test_shared_system_groups_and_prefixes() -> None:
    w = wl.make_workload("shared-system")
    assert isinstance(w, wl.SharedSystem)
    systems = w.system_lengths(seed=0)
    assert len(systems) == 8 and all(200 <= s <= 1000 for s in systems)
    reqs = w.sample(2000, seed=0)
    assert {r.group for r in reqs} == set(range(8))
    for r in reqs:
        assert r.group is not None
        assert r.prefix_len == systems[r.group]
        assert 20 <= r.prompt_len - r.prefix_len <= 200
        assert 32 <= r.output_len <= 256


def test_scale_and_cap() -> None:
    w = wl.make_workload("baseline", scale=0.5, max_total_len=100)
    assert w.params()["prompt"] == {"dist": "uniform", "min": 25, "max": 100}
    reqs = w.sample(2000, seed=0)
    assert all(r.prompt_len + r.output_len <= 100 for r in reqs)
    assert all(r.output_len >= 1 for r in reqs)
    scaled = wl.make_workload("sharegpt", scale=0.25).params()
    assert scaled["prompt"]["median"] == pytest.approx(
        wl.make_workload("sharegpt").params()["prompt"]["median"] / 4, rel=1e-3
    )


def test_long_prompt_and_long_output_ranges() -> None:
    long_prompt = wl.make_workload("long-prompt")
    assert long_prompt.params()["name"] == "long-prompt"
    reqs = long_prompt.sample(3000, seed=0)
    assert min(r.prompt_len for r in reqs) == 1500 and max(r.prompt_len for r in reqs) == 3000
    assert min(r.output_len for r in reqs) == 16 and max(r.output_len for r in reqs) == 64
    long_output = wl.make_workload("long-output", max_total_len=4096)
    reqs = long_output.sample(3000, seed=0)
    assert all(50 <= r.prompt_len <= 200 and 1000 <= r.output_len <= 2000 for r in reqs)
    assert wl.make_workload("long-prompt", scale=0.1).params()["prompt"]["min"] == 150


def test_mixed_is_a_shuffled_ninety_ten_stream() -> None:
    w = wl.make_workload("mixed")
    assert isinstance(w, wl.Mixed)
    reqs = w.sample(300, seed=0)
    kinds = [r.kind for r in reqs]
    assert kinds.count("long") == 30 and kinds.count("short") == 270
    for r in reqs:
        if r.kind == "long":
            assert 1500 <= r.prompt_len <= 3000 and 16 <= r.output_len <= 64
        else:
            assert 50 <= r.prompt_len <= 200 and 32 <= r.output_len <= 256
    long_positions = [i for i, k in enumerate(kinds) if k == "long"]
    assert long_positions != list(range(270, 300))  # shuffled, not appended
    assert long_positions[0] < 100 and long_positions[-1] > 200
    assert w.sample(300, seed=0) == reqs and w.sample(300, seed=1) != reqs
    assert [r.kind for r in w.sample(15, seed=0)].count("long") == 2
    scaled = wl.make_workload("mixed", scale=0.1).params()
    assert scaled["long"]["prompt"] == {"dist": "uniform", "min": 150, "max": 300}
    with pytest.raises(wl.WorkloadError, match="long_fraction"):
        wl.Mixed(long_fraction=1.5).sample(10, seed=0)


def test_chat_turns_grow_by_user_and_assistant_parts() -> None:
    w = wl.make_workload("chat")
    assert isinstance(w, wl.Chat)
    reqs = w.sample(400, seed=0)
    assert len(reqs) == 400
    # ordered by turn: all turn-1s, then all turn-2s, ...
    assert [r.kind for r in reqs] == [f"turn-{t}" for t in range(1, 5) for _ in range(100)]
    assert [r.group for r in reqs[:100]] == list(range(100))
    by_conv: dict[int, list[wl.Request]] = {}
    for r in reqs:
        assert r.group is not None
        by_conv.setdefault(r.group, []).append(r)
    for turns in by_conv.values():
        assert len(turns) == 4
        system = turns[0].prefix_len
        assert 200 <= system <= 400
        assert 20 <= turns[0].prompt_len - system <= 100
        for prev, cur in zip(turns, turns[1:], strict=False):
            assert 32 <= prev.output_len <= 256
            assert cur.prefix_len == prev.prompt_len  # shares the previous prompt
            user = cur.prompt_len - prev.prompt_len - prev.output_len
            assert 20 <= user <= 100  # history + assistant part (= that turn's output) + user
    assert w.sample(400, seed=0) == reqs
    cut = w.sample(10, seed=0)  # 3 conversations, cut to 10 requests
    assert [r.kind for r in cut].count("turn-4") == 1
    with pytest.raises(wl.WorkloadError, match="exceeds max_total_len"):
        wl.make_workload("chat", max_total_len=1000).sample(400, seed=0)


def test_shared_system_that_cannot_fit_is_refused() -> None:
    with pytest.raises(wl.WorkloadError, match="scale the workload down"):
        wl.make_workload("shared-system", max_total_len=300).sample(10, seed=0)


def test_bad_names_and_scales() -> None:
    with pytest.raises(wl.WorkloadError, match="unknown workload"):
        wl.make_workload("nope")
    with pytest.raises(wl.WorkloadError, match="scale"):
        wl.make_workload("baseline", scale=0)


# --------------------------------------------------------------------------
# prompt text (tiny model's tokenizer)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    folder = REPO / "models" / "tiny-llama"
    if not (folder / "tokenizer.json").is_file():
        from proxima_tools.tiny_model import make_tiny_model

        folder = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")
    return wl.load_tokenizer(folder)


@pytest.mark.parametrize("name", wl.WORKLOAD_NAMES)
def test_written_prompts_are_token_exact(name: str, tokenizer: Any, tmp_path: Path) -> None:
    scale = 0.4 if name in ("shared-system", "chat") else 1.0  # fit the tiny model's 1024
    w = wl.make_workload(name, scale=scale, max_total_len=1024)
    written = wl.write_dataset(w, 40, tokenizer, tmp_path / f"{name}.jsonl", seed=3)
    lines = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert len(lines) == 40
    assert [x["prompt_len"] for x in lines] == [r.prompt_len for r in written.requests]
    for x in lines:
        # what vLLM's custom dataset and the server count
        assert len(tokenizer(x["prompt"]).input_ids) == x["prompt_len"]
        assert isinstance(x["output_tokens"], int) and x["output_tokens"] >= 1


def test_shared_system_prompts_share_exact_token_prefixes(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("shared-system", scale=0.4, max_total_len=1024)
    wl.write_dataset(w, 60, tokenizer, tmp_path / "s.jsonl", seed=0)
    first: dict[int, list[int]] = {}
    for line in (tmp_path / "s.jsonl").read_text().splitlines():
        x = json.loads(line)
        ids = tokenizer(x["prompt"]).input_ids
        prefix = ids[: x["prefix_len"]]
        assert first.setdefault(x["group"], prefix) == prefix
    assert len(first) >= 6  # most of the 8 system prompts are used


def test_chat_prompts_extend_the_previous_turn_exactly(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("chat", scale=0.3, max_total_len=1024)
    written = wl.write_dataset(w, 24, tokenizer, tmp_path / "chat.jsonl", seed=1, content_seed=5)
    lines = [json.loads(x) for x in (tmp_path / "chat.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == [r.kind for r in written.requests]
    previous: dict[int, tuple[str, list[int]]] = {}
    for x in lines:
        ids = tokenizer(x["prompt"]).input_ids
        assert len(ids) == x["prompt_len"]
        if x["group"] in previous:
            text, prev_ids = previous[x["group"]]
            assert x["prompt"].startswith(text)
            assert ids[: x["prefix_len"]] == prev_ids  # token-exact shared history
        else:
            assert x["kind"] == "turn-1"
        previous[x["group"]] = (x["prompt"], ids)
    assert wl.read_lengths(written.path) == written.requests
    other = wl.write_dataset(w, 24, tokenizer, tmp_path / "o.jsonl", seed=1, content_seed=6)
    assert other.requests == written.requests
    first = json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])["prompt"]
    assert first != lines[0]["prompt"]  # fresh system parts with a new content seed


def test_system_seed_gives_fresh_system_prompts(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("shared-system", scale=0.3, max_total_len=1024)
    a = wl.write_dataset(w, 8, tokenizer, tmp_path / "a.jsonl", seed=0, content_seed=1)
    b = wl.write_dataset(w, 8, tokenizer, tmp_path / "b.jsonl", seed=0, content_seed=1)
    c = wl.write_dataset(
        w, 8, tokenizer, tmp_path / "c.jsonl", seed=0, content_seed=1, system_seed=9
    )
    assert a.requests == c.requests
    prompts = {
        f.path: [json.loads(x)["prompt"] for x in f.path.read_text().splitlines()]
        for f in (a, b, c)
    }
    assert prompts[a.path] == prompts[b.path]
    for x, y, req in zip(prompts[a.path], prompts[c.path], a.requests, strict=True):
        assert tokenizer(x).input_ids[: req.prefix_len] != tokenizer(y).input_ids[: req.prefix_len]


def test_content_seed_changes_words_not_lengths(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("baseline")
    a = wl.write_dataset(w, 10, tokenizer, tmp_path / "a.jsonl", seed=0, content_seed=0)
    b = wl.write_dataset(w, 10, tokenizer, tmp_path / "b.jsonl", seed=0, content_seed=1000)
    c = wl.write_dataset(w, 10, tokenizer, tmp_path / "c.jsonl", seed=0, content_seed=0)
    assert a.requests == b.requests
    text = {
        p: [json.loads(x)["prompt"] for x in p.read_text().splitlines()]
        for p in (a.path, b.path, c.path)
    }
    assert text[a.path] == text[c.path]  # deterministic
    assert all(x != y for x, y in zip(text[a.path], text[b.path], strict=True))  # fresh words


def test_read_lengths_round_trip_and_errors(tokenizer: Any, tmp_path: Path) -> None:
    w = wl.make_workload("baseline")
    written = wl.write_dataset(w, 12, tokenizer, tmp_path / "w.jsonl", seed=0)
    assert wl.read_lengths(written.path) == written.requests
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "hi", "output_tokens": 3}) + "\n")
    with pytest.raises(wl.WorkloadError, match="prompt_len"):
        wl.read_lengths(other)
    with pytest.raises(wl.WorkloadError, match=".jsonl"):
        wl.write_dataset(w, 2, tokenizer, tmp_path / "w.json")


def test_cli_lengths_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert wl.main(["sharegpt", "--num", "1000", "--lengths-only"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_requests"] == 1000 and out["params"]["name"] == "sharegpt"
