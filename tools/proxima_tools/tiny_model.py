"""Build the embedded default model: a tiny, seeded, random-weight Llama.

``PYTHONPATH=tools python -m proxima_tools.tiny_model --out models/tiny-llama [--force]`` writes a
Hugging Face-format folder (config, safetensors weights, byte-level BPE
tokenizer with a chat template, generation config) that vLLM serves on CPU.

Everything is derived from fixed seeds and an in-code corpus, so two builds
give byte-identical files.  The build needs only ``numpy``, ``tokenizers`` and
``safetensors`` (no torch) and takes a few seconds.

The weights are random but scaled so that logits are peaky: greedy decoding
then rarely flips between two attention implementations because of rounding
noise.  ``--measure`` (transformers, float32, 50 random-token prompts of
20-200 tokens, 32 greedy tokens each) gave: mean top-1/top-2 logit gap 3.04,
3.4% of steps with a gap below 0.1, 30.5 distinct tokens per 32-token
continuation (min 24), no continuation collapsed to one repeated token.
Special tokens and non-printable byte tokens are never generated (see
:func:`muted_token_ids`), so outputs run to max_tokens as printable ASCII.
"""

from __future__ import annotations

import os

# Single-threaded, order-stable tokenizer training.  These must be set before
# ``tokenizers`` first builds its thread pool; train_tokenizer() also turns
# TOKENIZERS_PARALLELISM off while it trains, in case tokenizers was imported
# (and its pool built) before this module.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")

import argparse
import contextlib
import dataclasses
import hashlib
import json
import random
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECIPE = "proxima-tiny-llama"
# Bump whenever anything that changes the written bytes changes.
RECIPE_VERSION = 1
MANIFEST_NAME = "tiny-model-manifest.json"

CORPUS_SEED = 20260
WEIGHT_SEED = 1234
VOCAB_SIZE = 1024
CORPUS_LINES = 3000

BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (UNK, BOS, EOS, PAD, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    """Architecture of the tiny model."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5


@dataclass(frozen=True)
class InitScale:
    """Random-init scales, chosen for peaky yet context-dependent logits.

    ``embed`` is the per-element std of the token embeddings.  The others are
    the std of a projection's *output* for a unit-RMS input (per-element std
    is that divided by sqrt(fan_in)): ``qk`` sets how sharp attention is,
    ``vo`` how much attention writes into the residual stream, ``mlp`` the
    same for the MLP, ``lm_head`` the logit std (hence the top-1/top-2 gap).
    """

    embed: float = 1.0
    qk: float = 1.5
    vo: float = 1.0
    mlp: float = 1.0
    lm_head: float = 10.0


SHAPE = Shape()
INIT = InitScale()

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
ALL_FILES = (*MODEL_FILES, MANIFEST_NAME)


# --------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_NOUNS = _words(
    "cat dog bird fish horse river mountain city village garden house window door "
    "table chair book letter story song voice teacher student doctor farmer baker "
    "sailor pilot engineer writer painter child friend neighbour king queen road "
    "bridge tower forest field cloud rain storm wind sun moon star sky ocean island "
    "ship train car bicycle clock lamp candle kitchen bread apple orange lemon tea "
    "coffee water milk cheese market shop bank school library museum theatre park "
    "computer program server memory cache token model layer network signal engine "
    "question answer problem idea plan reason method result number list page word "
    "morning evening night winter summer spring autumn year month week day hour"
)
_ADJECTIVES = _words(
    "small large old young quiet loud bright dark warm cold quick slow happy sad "
    "green blue red yellow white black golden silver careful clever gentle brave "
    "strange simple busy empty full heavy light early late long short new ancient "
    "modern local distant tiny huge patient curious honest tired hungry calm"
)
_VERBS_PAST = _words(
    "saw found built opened closed carried painted wrote read watched followed "
    "visited cleaned fixed moved chose brought kept left helped asked answered "
    "cooked planted counted measured remembered forgot explained described "
    "noticed reached crossed climbed"
)
_VERBS_PRESENT = _words(
    "sees finds builds opens closes carries paints writes reads watches follows "
    "visits cleans fixes moves chooses brings keeps leaves helps asks answers "
    "cooks plants counts measures remembers explains describes notices reaches"
)
_VERBS_BASE = _words(
    "see find build open close carry paint write read watch follow visit clean "
    "fix move choose bring keep leave help ask answer cook plant count explain"
)
_PREPOSITIONS = _words("near behind under above beside inside across along beyond through")
_ADVERBS = _words("slowly quickly quietly carefully gladly rarely often always never soon")
_NAMES = _words(
    "Alice Bob Carol David Emma Frank Grace Henry Irene Jack Laura Martin Nina "
    "Oscar Paula Quentin Rosa Samuel Tara Victor Wendy"
)
_CONNECTIVES = ("and then", "but", "because", "while", "so", "after that", "although")
_QUESTIONS = (
    "What is the capital of {place}?",
    "How many {noun}s are in the {place2}?",
    "Why did the {noun} {verb} the {noun2}?",
    "Can you explain how a {noun} works?",
    "Where is the {adj} {noun}?",
    "Who {verbp} the {noun} every {time}?",
    "Please write a short story about a {adj} {noun}.",
    "Summarize the text in one sentence.",
    "Translate the word {noun} into French.",
)
_PLACES = _words("France Spain Italy Japan Brazil Canada Egypt Norway Kenya Peru")
_FIXED_LINES = (
    "Hello world! Hello there, how are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was a small village near a river.",
    "Thank you very much. You are welcome.",
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    print(i * i)",
    '{"name": "tiny", "layers": 2, "heads": 4}',
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2024, 3.14, 42%",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "Yes. No. Maybe. Okay! Sure? (maybe) [list] {set} <tag> #hash @user $5 & more...",
)


def _sentence(rng: random.Random) -> str:
    """One original English sentence from a small grammar."""
    noun, noun2 = rng.choice(_NOUNS), rng.choice(_NOUNS)
    adj, adj2 = rng.choice(_ADJECTIVES), rng.choice(_ADJECTIVES)
    kind = rng.randrange(6)
    if kind == 0:
        text = (
            f"The {adj} {noun} {rng.choice(_VERBS_PAST)} the {adj2} {noun2} "
            f"{rng.choice(_PREPOSITIONS)} the {rng.choice(_NOUNS)}."
        )
    elif kind == 1:
        text = (
            f"{rng.choice(_NAMES)} {rng.choice(_ADVERBS)} {rng.choice(_VERBS_PAST)} "
            f"a {adj} {noun} {rng.choice(_CONNECTIVES)} {rng.choice(_NAMES)} "
            f"{rng.choice(_VERBS_PAST)} it."
        )
    elif kind == 2:
        text = (
            f"Every {rng.choice(('morning', 'evening', 'week', 'day', 'winter'))}, "
            f"the {noun} {rng.choice(_VERBS_PRESENT)} {rng.randint(2, 99)} {noun2}s."
        )
    elif kind == 3:
        text = rng.choice(_QUESTIONS).format(
            place=rng.choice(_PLACES),
            place2=rng.choice(_NOUNS),
            noun=noun,
            noun2=noun2,
            adj=adj,
            verb=rng.choice(_VERBS_BASE),
            verbp=rng.choice(_VERBS_PRESENT),
            time=rng.choice(("day", "week", "year")),
        )
    elif kind == 4:
        text = (
            f"It was a {adj} {rng.choice(('day', 'night', 'year'))} in the {noun2}, "
            f"and the {noun} was {adj2}."
        )
    else:
        text = (
            f'"{rng.choice(("Look", "Listen", "Wait", "Come here"))}!" said '
            f"{rng.choice(_NAMES)}, {rng.choice(_ADVERBS)}."
        )
    return text


def corpus_lines(n_lines: int = CORPUS_LINES, seed: int = CORPUS_SEED) -> list[str]:
    """The deterministic training corpus for the tokenizer (plain English)."""
    rng = random.Random(seed)
    lines = list(_FIXED_LINES)
    while len(lines) < n_lines:
        lines.append(" ".join(_sentence(rng) for _ in range(rng.randint(1, 4))))
    return lines


# --------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------


@contextmanager
def _serial_tokenizers() -> Iterator[None]:
    """Force tokenizers to train without parallel iterators, then restore env."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> Any:
    """Train a byte-level BPE tokenizer on the in-code corpus."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with _serial_tokenizers():
        tok.train_from_iterator(corpus_lines(), trainer=trainer, length=CORPUS_LINES)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tokenizer training produced {tok.get_vocab_size()} tokens, expected "
            f"{vocab_size}; the corpus is too small for this vocabulary"
        )
    # Llama style: prepend <s> when encoding with add_special_tokens=True.
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A",
                pair=f"{BOS} $A {BOS} $B",
                special_tokens=[(BOS, tok.token_to_id(BOS))],
            ),
        ]
    )
    return tok


def _token_ids(tok: Any) -> dict[str, int]:
    ids: dict[str, int] = {}
    for name in SPECIAL_TOKENS:
        token_id = tok.token_to_id(name)
        if token_id is None:
            raise RuntimeError(f"special token {name!r} missing from the vocabulary")
        ids[name] = int(token_id)
    return ids


# --------------------------------------------------------------------------
# json files
# --------------------------------------------------------------------------


def config_dict(vocab_size: int, ids: dict[str, int], shape: Shape = SHAPE) -> dict[str, Any]:
    """config.json contents (legacy and transformers-5 key spellings both present)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "mlp_bias": False,
        "num_attention_heads": shape.num_heads,
        "num_hidden_layers": shape.num_layers,
        "num_key_value_heads": shape.num_kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }


def tokenizer_config_dict(ids: dict[str, int]) -> dict[str, Any]:
    """tokenizer_config.json contents."""
    added = {
        str(ids[name]): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for name in SPECIAL_TOKENS
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": list(ROLE_TOKENS),
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE.max_position_embeddings,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map_dict() -> dict[str, Any]:
    """special_tokens_map.json contents."""
    return {
        "additional_special_tokens": list(ROLE_TOKENS),
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
    }


def generation_config_dict(ids: dict[str, int]) -> dict[str, Any]:
    """generation_config.json: token ids only, so vLLM's defaults stay greedy-neutral."""
    return {
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------


def muted_token_ids(tok: Any) -> list[int]:
    """Ids the model should never generate: special tokens, and byte tokens that
    are not printable ASCII (partial UTF-8, control bytes).

    Their lm_head rows are zero, so their logit is 0 while the top logit is
    around +30: greedy never picks them and sampling essentially never does.
    Generations therefore run to max_tokens (no stray ``</s>``) and detokenize
    to clean printable text.
    """
    allowed = set(string.printable) - {"\r", "\x0b", "\x0c"}
    special = set(_token_ids(tok).values())
    muted = []
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id], skip_special_tokens=False)
        if token_id in special or not text or any(ch not in allowed for ch in text):
            muted.append(token_id)
    return muted


def make_weights(
    vocab_size: int,
    muted_ids: list[int] | tuple[int, ...] = (),
    shape: Shape = SHAPE,
    scale: InitScale = INIT,
    seed: int = WEIGHT_SEED,
) -> dict[str, Any]:
    """Seeded random float32 weights in HF Llama naming (numpy arrays).

    Drawn in float64 with numpy's PCG64 generator (platform independent), then
    cast to float32, so the bytes do not depend on torch or the CPU.  Rows of
    ``lm_head`` listed in ``muted_ids`` are zero (see :func:`muted_token_ids`).
    """
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    h, inter = shape.hidden_size, shape.intermediate_size
    q_out = shape.num_heads * shape.head_dim
    kv_out = shape.num_kv_heads * shape.head_dim

    def normal(rows: int, cols: int, std: float) -> Any:
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def linear(out_features: int, in_features: int, out_std: float) -> Any:
        return normal(out_features, in_features, out_std / in_features**0.5)

    def ones() -> Any:
        return np.ones((h,), dtype=np.float32)

    # Linear weights are [out, in] as in transformers.
    weights: dict[str, Any] = {"model.embed_tokens.weight": normal(vocab_size, h, scale.embed)}
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = ones()
        weights[p + "self_attn.q_proj.weight"] = linear(q_out, h, scale.qk)
        weights[p + "self_attn.k_proj.weight"] = linear(kv_out, h, scale.qk)
        weights[p + "self_attn.v_proj.weight"] = linear(kv_out, h, 1.0)
        weights[p + "self_attn.o_proj.weight"] = linear(h, q_out, scale.vo)
        weights[p + "post_attention_layernorm.weight"] = ones()
        weights[p + "mlp.gate_proj.weight"] = linear(inter, h, 1.0)
        weights[p + "mlp.up_proj.weight"] = linear(inter, h, 1.0)
        weights[p + "mlp.down_proj.weight"] = linear(h, inter, scale.mlp)
    weights["model.norm.weight"] = ones()
    lm_head = linear(vocab_size, h, scale.lm_head)
    lm_head[list(muted_ids)] = 0.0
    weights["lm_head.weight"] = lm_head
    return weights


# --------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_model_files(folder: Path) -> None:
    from safetensors.numpy import save_file

    tok = train_tokenizer()
    ids = _token_ids(tok)
    vocab_size = int(tok.get_vocab_size())
    (folder / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    _write_json(folder / "tokenizer_config.json", tokenizer_config_dict(ids))
    _write_json(folder / "special_tokens_map.json", special_tokens_map_dict())
    _write_json(folder / "config.json", config_dict(vocab_size, ids))
    _write_json(folder / "generation_config.json", generation_config_dict(ids))
    save_file(
        make_weights(vocab_size, muted_token_ids(tok)),
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    manifest = {
        "recipe": RECIPE,
        "recipe_version": RECIPE_VERSION,
        "files": {name: _sha256(folder / name) for name in MODEL_FILES},
    }
    _write_json(folder / MANIFEST_NAME, manifest)


def _make_readable(folder: Path) -> None:
    """Folder 0755, files 0644, whatever the umask and writers chose.

    NOTE: safetensors writes ``model.safetensors`` as 0600. A container running as another UID
    (the images' ``nonroot`` target) then can't read the weights, and vLLM reports that as a
    missing file, which sends users looking in the wrong place.
    """
    folder.chmod(0o755)
    for path in folder.iterdir():
        if path.is_file() and (path.stat().st_mode & 0o777) != 0o644:
            path.chmod(0o644)


def is_complete(out: Path) -> bool:
    """True when ``out`` holds an intact build of this recipe version."""
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        return False
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if manifest.get("recipe") != RECIPE or manifest.get("recipe_version") != RECIPE_VERSION:
        return False
    files = manifest.get("files", {})
    if set(files) != set(MODEL_FILES):
        return False
    return all(
        (out / name).is_file() and _sha256(out / name) == digest for name, digest in files.items()
    )


def make_tiny_model(out: Path, force: bool = False) -> Path:
    """Build the tiny model into ``out`` (atomically) and return ``out``.

    An existing complete build is reused unless ``force``.  An existing folder
    that is not a complete build is only replaced with ``force``.
    """
    out = Path(out).absolute()
    if out.exists() and not force:
        if is_complete(out):
            with contextlib.suppress(OSError):  # not ours, or read-only: left as it is
                _make_readable(out)  # a build from before the modes were set
            return out
        raise FileExistsError(
            f"{out} exists but is not a complete {RECIPE} v{RECIPE_VERSION} build; "
            "pass --force (force=True) to replace it"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_model_files(tmp)
        _make_readable(tmp)
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, trash / "old")
            os.replace(tmp, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            try:
                os.replace(tmp, out)
            except OSError:
                # A concurrent build won the race; its result is identical.
                if not is_complete(out):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


@dataclass(frozen=True)
class LogitStats:
    """Greedy-decoding statistics of a model on random prompts (float32)."""

    prompts: int
    steps: int
    mean_gap: float  # mean over all steps of top-1 minus top-2 logit
    min_gap: float
    frac_gap_below_0_1: float
    mean_distinct: float  # mean number of distinct tokens per continuation
    min_distinct: int
    collapsed: int  # continuations whose second half is one repeated token
    sample: str  # decoded continuation of the first prompt


def measure_logits(
    model_dir: Path,
    n_prompts: int = 50,
    min_len: int = 20,
    max_len: int = 200,
    new_tokens: int = 32,
    seed: int = 0,
) -> LogitStats:
    """Greedy-decode random-token prompts with transformers in float32 and
    measure how peaky the logits are and how varied the continuations are.

    Prompts are ``<s>`` followed by uniformly random non-special token ids,
    with lengths uniform in [min_len, max_len].  Needs torch and transformers.
    """
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    vocab_size = int(model.config.vocab_size)
    first_regular = len(SPECIAL_TOKENS)
    rng = np.random.Generator(np.random.PCG64(seed))
    gaps: list[Any] = []
    distinct: list[int] = []
    collapsed = 0
    sample = ""
    with torch.inference_mode():
        for index in range(n_prompts):
            length = int(rng.integers(min_len, max_len + 1))
            body = rng.integers(first_regular, vocab_size, size=length - 1).tolist()
            input_ids = torch.tensor([[tokenizer.bos_token_id, *body]])
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
            )
            logits = torch.stack(out.logits, dim=1)[0].float()
            top2 = logits.topk(2, dim=-1).values
            gaps.append(top2[:, 0] - top2[:, 1])
            continuation = out.sequences[0, length:].tolist()
            distinct.append(len(set(continuation)))
            collapsed += len(set(continuation[new_tokens // 2 :])) == 1
            if index == 0:
                sample = tokenizer.decode(continuation)
    all_gaps = torch.cat(gaps)
    return LogitStats(
        prompts=n_prompts,
        steps=int(all_gaps.numel()),
        mean_gap=float(all_gaps.mean()),
        min_gap=float(all_gaps.min()),
        frac_gap_below_0_1=float((all_gaps < 0.1).float().mean()),
        mean_distinct=float(np.mean(distinct)),
        min_distinct=min(distinct),
        collapsed=collapsed,
        sample=sample,
    )


def _human_size(n_bytes: int) -> str:
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.tiny_model",
        description=(
            "Build the tiny seeded Llama (HF format) that proxima-vllm uses as its default model."
        ),
    )
    parser.add_argument("--out", type=Path, default=Path("models/tiny-llama"), help="output folder")
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if a complete build exists"
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="afterwards greedy-decode random prompts with transformers (needs torch) and "
        "report logit peakiness and continuation variety",
    )
    parser.add_argument("--prompts", type=int, default=50, help="number of prompts for --measure")
    args = parser.parse_args(argv)

    out: Path = args.out
    start = time.perf_counter()
    reused = out.exists() and not args.force and is_complete(out)
    try:
        make_tiny_model(out, force=args.force)
    except (OSError, RuntimeError, ImportError) as exc:
        print(f"tiny_model: error: {exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    verb = "reused existing" if reused else "built"
    print(f"{verb} {RECIPE} v{RECIPE_VERSION} at {out} in {elapsed:.2f}s")
    for name in ALL_FILES:
        path = out / name
        print(f"  {name:28s} {_human_size(path.stat().st_size):>10s}  sha256 {_sha256(path)[:16]}")
    if args.measure:
        start = time.perf_counter()
        try:
            stats = measure_logits(out, n_prompts=args.prompts)
        except ImportError as exc:
            print(
                f"tiny_model: error: --measure needs torch and transformers: {exc}",
                file=sys.stderr,
            )
            return 1
        print(f"measured in {time.perf_counter() - start:.1f}s:")
        for key, value in dataclasses.asdict(stats).items():
            shown = f"{value:.4f}" if isinstance(value, float) else repr(value)
            print(f"  {key:20s} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
