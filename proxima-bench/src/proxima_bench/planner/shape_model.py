"""A dummy-weight model folder with a real model's KV shape, for serving runs.

The OpenAI server and ``vllm bench serve`` need a tokenizer; an air-gapped GPU
host has no 7B weights. This writes a folder with a preset's architecture
(e.g. Llama-2-7B: 32 layers, 32 KV heads, head_dim 128, bf16) whose
``vocab_size`` is the given tokenizer's (the tiny model's byte-level BPE), plus
that tokenizer's files. Serve it with ``--load-format dummy``: the KV cache
per token, attention and MLP work are the real model's; only the embedding
and LM head are smaller. Outputs are random tokens, so run with ``ignore_eos``
(serve_ab always does).

``python -m proxima_bench.planner.shape_model --shape llama-2-7b
--tokenizer models/tiny-llama --out build/llama-2-7b-shape``

``--sliding-window N --layers PATTERN`` makes a sliding-window variant of the
shape through the config alone (vLLM's Llama reads ``layer_types`` and
``sliding_window``): ``alternating`` (sliding, full, ...: Gemma-2's and
gpt-oss's layout; gpt-oss's window is 128), ``5:1`` (five sliding, one full:
Gemma-3's) or ``all-sliding`` (Mistral-7B-v0.1's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxima_bench.planner.plan import PRESETS, PlannerError, load_shape

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
)
MANIFEST = "shape-model.json"
LAYER_PATTERNS = {
    "alternating": ("sliding_attention", "full_attention"),
    "5:1": ("sliding_attention",) * 5 + ("full_attention",),
    "all-sliding": ("sliding_attention",),
}


class ShapeModelError(ValueError):
    """Bad shape or tokenizer folder."""


def _tokenizer_facts(folder: Path) -> dict[str, Any]:
    config = (
        json.loads((folder / "config.json").read_text())
        if (folder / "config.json").is_file()
        else {}
    )
    vocab = config.get("vocab_size")
    if vocab is None and (folder / "tokenizer.json").is_file():
        data = json.loads((folder / "tokenizer.json").read_text())
        vocab = len(data.get("model", {}).get("vocab", {})) + len(data.get("added_tokens", []))
    if not vocab:
        raise ShapeModelError(f"cannot tell the vocabulary size of the tokenizer in {folder}")
    return {
        "vocab_size": int(vocab),
        "bos_token_id": config.get("bos_token_id", 1),
        "eos_token_id": config.get("eos_token_id", 2),
        "pad_token_id": config.get("pad_token_id"),
    }


def layer_types(pattern: str, num_layers: int) -> list[str]:
    """``num_layers`` layer kinds repeating ``pattern`` (a :data:`LAYER_PATTERNS` name)."""
    if pattern not in LAYER_PATTERNS:
        known = ", ".join(LAYER_PATTERNS)
        raise ShapeModelError(f"unknown layer pattern {pattern!r}; one of {known}")
    cycle = LAYER_PATTERNS[pattern]
    return [cycle[i % len(cycle)] for i in range(num_layers)]


def make_shape_model(
    shape_spec: str,
    tokenizer: Path,
    out: Path,
    dtype: str = "bfloat16",
    sliding_window: int | None = None,
    layers: str = "alternating",
) -> Path:
    """Write the folder (config.json, tokenizer files, a manifest); returns ``out``.

    Args:
        shape_spec: a planner preset name or a config.json / model folder.
        tokenizer: a local folder with a Hugging Face tokenizer.
        out: the folder to (re)write.
        dtype: the model dtype written into the config.
        sliding_window: a window in tokens for the sliding layers (None: all full).
        layers: the :data:`LAYER_PATTERNS` name used with ``sliding_window``.

    Raises:
        ShapeModelError: unknown shape or layer pattern, a bad window, or no tokenizer.
    """
    if sliding_window is not None and sliding_window < 1:
        raise ShapeModelError(f"sliding window must be >= 1 token, got {sliding_window}")
    try:
        shape = load_shape(shape_spec)
    except PlannerError as e:
        raise ShapeModelError(str(e)) from e
    if None in (shape.hidden_size, shape.num_heads, shape.intermediate_size):
        raise ShapeModelError(f"{shape_spec}: hidden/heads/intermediate sizes are needed")
    files = [tokenizer / name for name in TOKENIZER_FILES if (tokenizer / name).is_file()]
    if not any(f.name in ("tokenizer.json", "tokenizer.model") for f in files):
        raise ShapeModelError(f"no tokenizer.json / tokenizer.model in {tokenizer}")
    facts = _tokenizer_facts(tokenizer)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_attention_heads": shape.num_heads,
        "num_hidden_layers": shape.num_layers,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position_embeddings or 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        **facts,
    }
    if sliding_window is not None:
        config["sliding_window"] = sliding_window
        config["layer_types"] = layer_types(layers, shape.num_layers)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in files:
        shutil.copyfile(f, out / f.name)
    manifest = {
        "shape": shape.name,
        "tokenizer": str(tokenizer),
        "note": "serve with --load-format dummy",
        "sliding_window": sliding_window,
        "layers": layers if sliding_window is not None else "all-full",
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(
        prog="python -m proxima_bench.planner.shape_model",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--shape", required=True, help=f"preset ({', '.join(PRESETS)}) or config.json")
    p.add_argument("--tokenizer", type=Path, required=True, help="local tokenizer folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--sliding-window", type=int, help="window (tokens) of the sliding layers")
    p.add_argument(
        "--layers",
        default="alternating",
        choices=sorted(LAYER_PATTERNS),
        help="layer pattern with --sliding-window (alternating)",
    )
    args = p.parse_args(argv)
    try:
        out = make_shape_model(
            args.shape, args.tokenizer, args.out, args.dtype, args.sliding_window, args.layers
        )
    except ShapeModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (serve with --load-format dummy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
