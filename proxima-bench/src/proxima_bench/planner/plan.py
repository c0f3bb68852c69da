"""KV capacity planner: stock vLLM blocks vs proxima's 1-token slots.

Given a model's attention shape, the KV cache bytes (or GPU memory and a
utilisation), the KV dtype and a prompt / output length distribution, prints:

* **KV capacity** in tokens. Stock: ``kv_bytes // (block_size * bytes_per_token)``
  blocks, one of them vLLM's null block, so ``(blocks - 1) * block_size`` usable.
  Proxima: ``kv_bytes // bytes_per_token`` slots minus one null slot.
  ``bytes_per_token = 2 (K and V) * layers * kv_heads * head_dim * dtype bytes``.
* **Mean live tokens per request** over its lifetime, weighted by time (decode
  steps): a request with prompt P and output O holds P tokens at prefill and
  P + t at decode step t = 1..O-1 (the last sampled token is never cached), so
  the mean is ``E[sum of held tokens] / E[O]``; stock rounds every holding up
  to whole blocks (about (block_size - 1) / 2 = 7.5 tokens more per request).
* **Expected resident requests**: usable tokens / mean live tokens (the
  concurrency the KV pool sustains in steady state; capped at ``max_num_seqs``).
* **Preemption risk** per client concurrency c, Monte Carlo with a fixed seed:
  *burst*: c requests arrive together and are admitted while their prompts fit
  (stock admission); risk = P(their peak demand, tracked step by step as they
  decode in lockstep and finish, exceeds the pool). *steady*: c requests at
  independent, length-biased points of their lives (closed-loop load at
  concurrency c); risk = P(the sum of held tokens exceeds the pool).

Full-attention decoder models only (no sliding window / MLA accounting); prefix
sharing is ignored. ``--check RAW.json`` compares the predictions with a
:mod:`serve_ab` run (capacity from the server's own figures, KV usage,
running requests and preemptions per point).

Example: ``python -m proxima_bench.planner --model llama-2-7b --kv-bytes 8GiB
--kv-dtype bf16 --workload baseline``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

GIB = 1024**3
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
NULL_BLOCKS = 1  # vLLM reserves block 0; proxima reserves slot 0

DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "float": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
}


class PlannerError(ValueError):
    """Bad planner input."""


@dataclass(frozen=True)
class ModelShape:
    """The attention shape that sizes the KV cache (plus optional weight sizes)."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    hidden_size: int | None = None
    num_heads: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """Bytes of K and V for one token over all layers."""
        return (
            2
            * self.num_layers
            * self.num_kv_heads
            * self.head_dim
            * dtype_bytes(self.dtype if kv_dtype == "auto" else kv_dtype)
        )

    def num_params(self) -> int | None:
        """Parameter count of a Llama-style decoder (None if fields are missing)."""
        h, n, i, v = (
            self.hidden_size,
            self.num_heads,
            self.intermediate_size,
            self.vocab_size,
        )
        if None in (h, n, i, v):
            return None
        assert h is not None and n is not None and i is not None and v is not None
        q = h * n * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = n * self.head_dim * h
        mlp = 3 * h * i
        per_layer = q + kv + o + mlp + 2 * h
        embed = v * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embed + h


PRESETS: dict[str, ModelShape] = {
    s.name: s
    for s in (
        ModelShape("llama-2-7b", 32, 32, 128, "bfloat16", 4096, 32, 11008, 32000, False, 4096),
        ModelShape("llama-2-13b", 40, 40, 128, "bfloat16", 5120, 40, 13824, 32000, False, 4096),
        ModelShape("llama-2-70b", 80, 8, 128, "bfloat16", 8192, 64, 28672, 32000, False, 4096),
        ModelShape("llama-3-8b", 32, 8, 128, "bfloat16", 4096, 32, 14336, 128256, False, 8192),
        ModelShape("llama-3-70b", 80, 8, 128, "bfloat16", 8192, 64, 28672, 128256, False, 8192),
        ModelShape("mistral-7b", 32, 8, 128, "bfloat16", 4096, 32, 14336, 32000, False, 32768),
        ModelShape("qwen2.5-7b", 28, 4, 128, "bfloat16", 3584, 28, 18944, 152064, False, 32768),
    )
}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name (``bf16``, ``float32``, ``fp8``...).

    Raises:
        PlannerError: unknown dtype.
    """
    key = str(name).lower().replace("torch.", "")
    if key not in DTYPE_BYTES:
        raise PlannerError(f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[key]


def shape_from_config(config: dict[str, Any], name: str = "config") -> ModelShape:
    """The shape of a Hugging Face ``config.json`` (``text_config`` if nested).

    Raises:
        PlannerError: missing fields, or an MLA model (not modelled).
    """
    if "text_config" in config and "num_hidden_layers" not in config:
        config = config["text_config"]
    if config.get("kv_lora_rank"):
        raise PlannerError(f"{name}: MLA attention (kv_lora_rank) is not modelled")
    try:
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise PlannerError(f"{name}: missing attention fields ({e})") from e
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ModelShape(
        name=name,
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        hidden_size=hidden,
        num_heads=heads,
        intermediate_size=config.get("intermediate_size"),
        vocab_size=config.get("vocab_size"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_position_embeddings=config.get("max_position_embeddings"),
    )


def load_shape(spec: str) -> ModelShape:
    """A preset name, a ``config.json`` path or a model folder containing one.

    Raises:
        PlannerError: not a preset and no readable config.
    """
    if spec.lower() in PRESETS:
        return PRESETS[spec.lower()]
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise PlannerError(
            f"--model {spec!r}: not a preset ({', '.join(PRESETS)}) nor a config.json"
        )
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlannerError(f"cannot read {path}: {e}") from e
    return shape_from_config(config, str(path))


_SIZE = re.compile(r"^\s*([\d.]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}


def parse_bytes(text: str) -> int:
    """``8GiB`` / ``16MiB`` / ``8e9`` / ``17179869184`` -> bytes (``GB`` = 10^9).

    Raises:
        PlannerError: unparseable.
    """
    m = _SIZE.match(str(text))
    if not m:
        try:
            return int(float(text))
        except ValueError as e:
            raise PlannerError(f"bad byte size {text!r} (e.g. 8GiB, 16MiB, 8589934592)") from e
    number, unit = float(m.group(1)), (m.group(2) or "").lower()
    binary = "i" in unit
    letter = unit[:1] if unit[:1] in "kmgt" else ""
    factor = 1024 ** "kmgt".index(letter) * 1024 if binary and letter else _UNITS[letter]
    return int(number * factor)


# --------------------------------------------------------------------------
# capacity
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Capacity:
    """KV capacity of one layout."""

    layout: str
    page_tokens: int
    pages: int
    slots: int
    usable_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return asdict(self)


def stock_capacity(kv_bytes: int, bytes_per_token: int, block_size: int = 16) -> Capacity:
    """vLLM's paged KV: whole blocks, minus the null block."""
    if block_size < 1 or bytes_per_token < 1:
        raise PlannerError("block size and bytes per token must be >= 1")
    blocks = kv_bytes // (block_size * bytes_per_token)
    usable = max(0, blocks - NULL_BLOCKS) * block_size
    return Capacity("stock", block_size, blocks, blocks * block_size, usable)


def proxima_capacity(kv_bytes: int, bytes_per_token: int) -> Capacity:
    """Proxima's pool of 1-token slots, minus the null slot."""
    slots = kv_bytes // bytes_per_token
    return Capacity("proxima", 1, slots, slots, max(0, slots - NULL_BLOCKS))


def kv_bytes_from_gpu(
    gpu_memory: int,
    utilization: float,
    weights: int,
    overhead: int,
) -> int:
    """KV bytes vLLM would get: ``memory * utilization - weights - overhead``.

    ``overhead`` stands for activations, CUDA graphs and the allocator's slack
    (vLLM measures these at start; a rough figure is all a planner can use).

    Raises:
        PlannerError: nothing left for the KV cache.
    """
    if not 0 < utilization <= 1:
        raise PlannerError("--gpu-util must be in (0, 1]")
    kv = int(gpu_memory * utilization) - weights - overhead
    if kv <= 0:
        raise PlannerError(
            f"no KV memory left: {gpu_memory / GIB:.1f} GiB x {utilization} - weights "
            f"{weights / GIB:.1f} GiB - overhead {overhead / GIB:.1f} GiB <= 0"
        )
    return kv


# --------------------------------------------------------------------------
# lengths
# --------------------------------------------------------------------------


@dataclass
class Lengths:
    """A length distribution: sampled (prompt, output) pairs to resample from."""

    description: str
    prompts: np.ndarray
    outputs: np.ndarray

    def draw(
        self, rng: np.random.Generator, size: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Resample (prompt, output) pairs jointly with shape ``size``."""
        idx = rng.integers(0, len(self.prompts), size=size)
        return self.prompts[idx], self.outputs[idx]

    def summary(self) -> dict[str, Any]:
        """Means and ranges, JSON-serialisable."""
        return {
            "description": self.description,
            "samples": len(self.prompts),
            "prompt_mean": round(float(self.prompts.mean()), 2),
            "prompt_range": [int(self.prompts.min()), int(self.prompts.max())],
            "output_mean": round(float(self.outputs.mean()), 2),
            "output_range": [int(self.outputs.min()), int(self.outputs.max())],
        }


def lengths_from_arrays(
    description: str,
    prompts: Sequence[int] | np.ndarray,
    outputs: Sequence[int] | np.ndarray,
) -> Lengths:
    """Lengths from explicit per-request values.

    Raises:
        PlannerError: empty, mismatched or non-positive.
    """
    p = np.asarray(prompts, dtype=np.int64)
    o = np.asarray(outputs, dtype=np.int64)
    if p.size == 0 or p.shape != o.shape:
        raise PlannerError("need equally many (>0) prompt and output lengths")
    if (p < 1).any() or (o < 1).any():
        raise PlannerError("lengths must be >= 1")
    return Lengths(description, p, o)


def _parse_dist(text: str, kind: str) -> tuple[str, list[float]]:
    parts = [x for x in text.replace(" ", "").split(",") if x]
    try:
        values = [float(x) for x in parts]
    except ValueError as e:
        raise PlannerError(f"bad {kind} distribution {text!r}") from e
    return kind, values


def sample_dist(spec: tuple[str, list[float]], rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw from ``("uniform", [lo, hi])`` or ``("lognormal", [mu, sigma, lo?, hi?])``,
    through the workloads' length model (``proxima_bench.workloads.lengths``).

    Raises:
        PlannerError: bad parameters.
    """
    from proxima_bench.workloads.lengths import LogNormal, WorkloadError, draw_uniform

    kind, v = spec
    if kind == "uniform":
        if len(v) != 2 or not 1 <= v[0] <= v[1]:
            raise PlannerError(f"uniform needs LO,HI with 1 <= LO <= HI; got {v}")
        return draw_uniform(rng, (int(v[0]), int(v[1])), n)
    if len(v) not in (2, 4) or v[1] < 0:
        raise PlannerError(f"lognormal needs MU,SIGMA[,MIN,MAX]; got {v}")
    lo, hi = (v[2], v[3]) if len(v) == 4 else (1, math.inf)
    # The workloads' log-normal (bounds may be fractional or unbounded here).
    try:
        return LogNormal(v[0], v[1], max(1, lo), hi).draw(rng, n)  # type: ignore[arg-type]
    except WorkloadError as e:
        raise PlannerError(str(e)) from e


# --------------------------------------------------------------------------
# per-request live tokens
# --------------------------------------------------------------------------


def _rounded_prefix_sum(n: np.ndarray, block: int) -> np.ndarray:
    """sum_{x=1..n} ceil(x / block) * block (0 for n <= 0)."""
    n = np.maximum(n, 0).astype(np.float64)
    q = np.floor(n / block)
    r = n - q * block
    return block * block * q * (q + 1) / 2 + r * (q + 1) * block


def lifetime_token_steps(prompts: np.ndarray, outputs: np.ndarray, block: int = 1) -> np.ndarray:
    """Per request: sum over its O steps of the tokens (rounded to blocks) it holds.

    Step 0 (prefill) holds P tokens, decode step t holds P + t, t = 1..O-1.
    """
    first = prompts
    last = prompts + outputs - 1
    if block == 1:
        return (first + last) * outputs / 2.0
    return _rounded_prefix_sum(last, block) - _rounded_prefix_sum(first - 1, block)


def alloc(tokens: np.ndarray, block: int) -> np.ndarray:
    """Tokens allocated for ``tokens`` held: rounded up to whole blocks."""
    return tokens if block == 1 else np.ceil(tokens / block) * block


def mean_live_tokens(lengths: Lengths, block: int = 1) -> float:
    """Time-weighted mean tokens a request holds: E[sum over steps] / E[steps]."""
    steps = lifetime_token_steps(lengths.prompts, lengths.outputs, block)
    return float(steps.sum() / lengths.outputs.sum())


# --------------------------------------------------------------------------
# Monte Carlo risk
# --------------------------------------------------------------------------


def burst_risk(
    lengths: Lengths,
    concurrency: int,
    usable: int,
    block: int,
    trials: int,
    rng: np.random.Generator,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> dict[str, float]:
    """c requests at once, admitted while prompts fit, decoding in lockstep.

    Returns:
        ``risk`` (fraction of trials whose step-by-step peak exceeds the pool),
        ``mean_admitted`` and ``mean_peak_usage`` (peak / pool, mean).
    """
    c = min(concurrency, max_num_seqs)
    exceed = 0
    admitted_total = 0.0
    peak_total = 0.0
    chunk = max(1, min(trials, 2_000_000 // max(1, c * c)))
    done = 0
    while done < trials:
        n = min(chunk, trials - done)
        p, o = lengths.draw(rng, (n, c))
        # stock admission: requests in arrival order while their prompt fits
        fits = np.cumsum(alloc(p, block), axis=1) <= usable
        admitted = np.cumprod(fits, axis=1).astype(bool)
        # peak just before a request finishes: times t_j = O_j - 1
        t = (o - 1)[:, None, :]  # (n, 1, c) candidate times
        alive = (o[:, :, None] > t) & admitted[:, :, None]  # (n, c_i, c_j)
        held = np.where(alive, alloc(p[:, :, None] + t, block), 0)
        peak = held.sum(axis=1).max(axis=1)
        exceed += int((peak > usable).sum())
        admitted_total += float(admitted.sum())
        peak_total += float((peak / usable).sum())
        done += n
    return {
        "risk": exceed / trials,
        "mean_admitted": admitted_total / trials,
        "mean_peak_usage": peak_total / trials,
    }


def steady_risk(
    lengths: Lengths,
    concurrency: int,
    usable: int,
    block: int,
    trials: int,
    rng: np.random.Generator,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> dict[str, float]:
    """c requests at independent, length-biased points of their lives.

    Returns:
        ``risk`` (P(sum held > pool)) and ``mean_usage`` (mean held / pool).
    """
    c = min(concurrency, max_num_seqs)
    weights = lengths.outputs / lengths.outputs.sum()  # time spent ~ steps
    idx = rng.choice(len(lengths.prompts), size=(trials, c), p=weights)
    p, o = lengths.prompts[idx], lengths.outputs[idx]
    t = np.floor(rng.random((trials, c)) * o)
    held = alloc(p + t, block).sum(axis=1)
    return {
        "risk": float((held > usable).mean()),
        "mean_usage": float((held / usable).mean()),
    }


# --------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------


def plan(
    shape: ModelShape,
    kv_bytes: int,
    lengths: Lengths,
    kv_dtype: str = "auto",
    block_size: int = DEFAULT_BLOCK_SIZE,
    concurrencies: Sequence[int] = DEFAULT_CONCURRENCY,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    trials: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Capacity, resident requests and preemption risk for stock and proxima.

    Returns:
        A JSON-serialisable dict (see :func:`format_plan`).
    """
    bpt = shape.kv_bytes_per_token(kv_dtype)
    layouts = {
        "stock": (stock_capacity(kv_bytes, bpt, block_size), block_size),
        "proxima": (proxima_capacity(kv_bytes, bpt), 1),
    }
    result: dict[str, Any] = {
        "model": asdict(shape),
        "kv_dtype": kv_dtype if kv_dtype != "auto" else shape.dtype,
        "kv_bytes": kv_bytes,
        "kv_bytes_per_token": bpt,
        "lengths": lengths.summary(),
        "max_num_seqs": max_num_seqs,
        "trials": trials,
        "seed": seed,
        "layouts": {},
    }
    for name, (cap, block) in layouts.items():
        live = mean_live_tokens(lengths, block)
        resident = cap.usable_tokens / live if live else math.inf
        risks = []
        for c in concurrencies:
            # The same draws for both layouts: a paired comparison.
            b = burst_risk(
                lengths,
                c,
                cap.usable_tokens,
                block,
                trials,
                np.random.default_rng([seed, c, 1]),
                max_num_seqs,
            )
            s = steady_risk(
                lengths,
                c,
                cap.usable_tokens,
                block,
                trials,
                np.random.default_rng([seed, c, 2]),
                max_num_seqs,
            )
            risks.append(
                {
                    "concurrency": c,
                    "expected_usage": min(c, max_num_seqs) * live / cap.usable_tokens
                    if cap.usable_tokens
                    else math.inf,
                    "burst_risk": b["risk"],
                    "burst_admitted": b["mean_admitted"],
                    "burst_peak_usage": b["mean_peak_usage"],
                    "steady_risk": s["risk"],
                    "steady_usage": s["mean_usage"],
                }
            )
        result["layouts"][name] = {
            "capacity": cap.to_dict(),
            "mean_live_tokens": live,
            "resident_requests": min(resident, max_num_seqs),
            "resident_requests_kv_only": resident,
            "risk": risks,
        }
    stock, prox = result["layouts"]["stock"], result["layouts"]["proxima"]
    result["block_rounding_tokens_per_request"] = (
        stock["mean_live_tokens"] - prox["mean_live_tokens"]
    )
    result["capacity_gain"] = (
        prox["capacity"]["usable_tokens"] / max(1, stock["capacity"]["usable_tokens"]) - 1
    )
    result["resident_gain"] = (
        prox["resident_requests_kv_only"] / stock["resident_requests_kv_only"] - 1
    )
    return result


def _row(label: str, a: float, b: float, fmt: str = ",") -> str:
    return f"{label:28}{a:>14{fmt}}{b:>14{fmt}}"


def format_plan(p: dict[str, Any]) -> str:
    """The plan as readable text."""
    s, x = p["layouts"]["stock"], p["layouts"]["proxima"]
    sc, xc = s["capacity"], x["capacity"]
    ln, model = p["lengths"], p["model"]
    shape = (
        f"{model['num_layers']} layers x {model['num_kv_heads']} KV heads "
        f"x head_dim {model['head_dim']}"
    )
    gains = (
        f"capacity {p['capacity_gain'] * 100:+.3f}%, resident requests "
        f"{p['resident_gain'] * 100:+.2f}% with proxima"
    )
    lines = [
        (
            f"model {model['name']}: {shape}, KV dtype {p['kv_dtype']} "
            f"-> {p['kv_bytes_per_token']:,} bytes/token"
        ),
        f"KV cache {p['kv_bytes']:,} bytes ({p['kv_bytes'] / GIB:.3f} GiB)",
        (
            f"lengths: {ln['description']}: prompt mean {ln['prompt_mean']} "
            f"{ln['prompt_range']}, output mean {ln['output_mean']} {ln['output_range']}"
        ),
        "",
        f"{'':28}{'stock':>14}{'proxima':>14}",
        _row("page size (tokens)", sc["page_tokens"], xc["page_tokens"]),
        _row("pages", sc["pages"], xc["pages"]),
        _row("slots", sc["slots"], xc["slots"]),
        _row("usable tokens (- null)", sc["usable_tokens"], xc["usable_tokens"]),
        _row(
            "mean live tokens / request",
            s["mean_live_tokens"],
            x["mean_live_tokens"],
            ",.1f",
        ),
        _row(
            "resident requests (KV)",
            s["resident_requests_kv_only"],
            x["resident_requests_kv_only"],
            ",.1f",
        ),
        "",
        (
            f"block rounding: {p['block_rounding_tokens_per_request']:.2f} tokens/request; "
            f"{gains} (max_num_seqs {p['max_num_seqs']})"
        ),
        "",
        f"preemption risk (Monte Carlo, {p['trials']} trials, seed {p['seed']}):",
        (
            f"{'conc':>6} | {'stock: E[use] burst steady':>29} | "
            f"{'proxima: E[use] burst steady':>31}"
        ),
    ]
    for rs, rx in zip(s["risk"], x["risk"], strict=True):
        stock = (
            f"{rs['expected_usage'] * 100:>12.1f}% {rs['burst_risk'] * 100:>6.1f}% "
            f"{rs['steady_risk'] * 100:>6.1f}%"
        )
        prox = (
            f"{rx['expected_usage'] * 100:>14.1f}% {rx['burst_risk'] * 100:>6.1f}% "
            f"{rx['steady_risk'] * 100:>6.1f}%"
        )
        lines.append(f"{rs['concurrency']:>6} | {stock} | {prox}")
    lines.append(
        "E[use]: c x mean live tokens / usable; burst: c arrive at once (lockstep "
        "decode); steady: c at random points of their lives."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# --check against a serve_ab run
# --------------------------------------------------------------------------


def _arg(args: Sequence[str], flag: str) -> str | None:
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def _series(run: dict[str, Any], name: str) -> list[float]:
    values = ((run.get("metrics_series") or {}).get("values") or {}).get(name) or []
    return [v for v in values if v is not None]


def _busy_mean(run: dict[str, Any], name: str) -> float | None:
    ts = (run.get("metrics_series") or {}).get("values") or {}
    running = ts.get("vllm:num_requests_running") or []
    values = ts.get(name) or []
    picked = [v for v, r in zip(values, running, strict=False) if v is not None and r]
    return sum(picked) / len(picked) if picked else None


def server_default_max_num_seqs(raw: dict[str, Any]) -> int:
    """vLLM 0.26's OpenAI-server default ``max_num_seqs`` on the run's machine.

    1024 on GPUs of 70 GiB or more other than A100 (H100, H200, MI300), 256 on
    other GPUs, 128 on CPU (``EngineArgs.get_batch_defaults``).
    """
    gpus = (raw.get("machine") or {}).get("gpus") or []
    if not gpus:
        return 128
    gpu = gpus[0]
    m = re.match(r"\s*([\d.]+)\s*MiB", str(gpu.get("memory_total", "")))
    big = m is not None and float(m.group(1)) * 2**20 >= 70 * GIB
    return 1024 if big and "a100" not in str(gpu.get("name", "")).lower() else 256


def check(
    raw: dict[str, Any], trials: int = 500, seed: int = 0, model: str | None = None
) -> dict[str, Any]:
    """Predicted vs measured for every mode and point of a serve_ab raw record.

    ``model`` (a preset, config.json or folder) replaces the run's model path, which
    usually names a folder on the machine that ran it.

    Raises:
        PlannerError: the record lacks what a prediction needs.
    """
    cfg = raw.get("config") or {}
    wl = (raw.get("workload") or {}).get("lengths")
    if not wl:
        raise PlannerError("the raw record has no workload lengths (run with a generated workload)")
    lengths = lengths_from_arrays("measured run's workload", wl["prompt"], wl["output"])
    try:
        shape = load_shape(model or str(cfg.get("model")))
    except PlannerError as e:
        if model:
            raise
        raise PlannerError(f"{e}; pass --model (a preset or the run's config.json)") from e
    out: dict[str, Any] = {"lengths": lengths.summary(), "modes": {}}
    for label, record in (raw.get("modes") or {}).items():
        mode_cfg = next((m for m in cfg.get("modes", []) if m["label"] == label), None) or {}
        args = [*cfg.get("server_args", []), *mode_cfg.get("args", [])]
        kv_dtype = _arg(args, "--kv-cache-dtype") or "auto"
        if kv_dtype == "auto":
            kv_dtype = _arg(args, "--dtype") or "auto"
            if kv_dtype == "auto":
                kv_dtype = shape.dtype
        server = record.get("server") or {}
        cache = (server.get("cache_config") or [{}])[0] if server.get("cache_config") else {}
        measured_block = int(cache["block_size"]) if cache.get("block_size") else None
        proxima = record.get("proxima") == "on"
        # Proxima's token layout has 1-token slots; its paged layout (the default) holds
        # vLLM's own pages, as stock does.
        token = proxima and (measured_block == 1 or _arg(args, "--proxima-kv-layout") == "token")
        block = (
            1 if token else int(_arg(args, "--block-size") or measured_block or DEFAULT_BLOCK_SIZE)
        )
        kv_arg = _arg(args, "--kv-cache-memory-bytes")
        bpt = shape.kv_bytes_per_token(kv_dtype)
        notes = []
        if kv_arg:
            kv_bytes = parse_bytes(kv_arg)
        elif cache.get("num_gpu_blocks") and measured_block:
            kv_bytes = int(cache["num_gpu_blocks"]) * measured_block * bpt
            notes.append(
                "KV bytes taken from the server's block count (no --kv-cache-memory-bytes)"
            )
        else:
            raise PlannerError(f"mode {label}: no --kv-cache-memory-bytes and no cache_config_info")
        cap = proxima_capacity(kv_bytes, bpt) if token else stock_capacity(kv_bytes, bpt, block)
        measured_cap = None
        if proxima:
            totals = [
                v for run in record.get("runs", []) for v in _series(run, "proxima:kv_slots_total")
            ]
            measured_cap = int(max(totals)) if totals else None
        elif cache.get("num_gpu_blocks") and measured_block:
            measured_cap = (int(cache["num_gpu_blocks"]) - NULL_BLOCKS) * measured_block
        live = mean_live_tokens(lengths, block)
        max_seqs = int(_arg(args, "--max-num-seqs") or server_default_max_num_seqs(raw))
        points = []
        for run in record.get("runs", []):
            c = run["point"].get("max_concurrency")
            if c is None or run.get("error"):
                continue
            st = steady_risk(
                lengths,
                c,
                cap.usable_tokens,
                block,
                trials,
                np.random.default_rng([seed, c, 2]),
                max_seqs,
            )
            bu = burst_risk(
                lengths,
                c,
                cap.usable_tokens,
                block,
                trials,
                np.random.default_rng([seed, c, 1]),
                max_seqs,
            )
            summary = run.get("summary") or {}
            points.append(
                {
                    "label": run["point"]["label"],
                    "predicted_mean_usage": min(1.0, min(c, max_seqs) * live / cap.usable_tokens),
                    "measured_mean_busy_usage": _busy_mean(run, "vllm:kv_cache_usage_perc"),
                    "predicted_steady_usage": st["mean_usage"],
                    "measured_peak_usage": summary.get("peak_kv_usage"),
                    "predicted_burst_peak_usage": bu["mean_peak_usage"],
                    "predicted_resident": min(c, max_seqs, cap.usable_tokens / live),
                    "measured_mean_running": summary.get("mean_running"),
                    "measured_peak_running": summary.get("peak_running"),
                    "predicted_risk_steady": st["risk"],
                    "predicted_risk_burst": bu["risk"],
                    "measured_preemptions": summary.get("preemptions"),
                }
            )
        out["modes"][label] = {
            "layout": ("proxima-token" if token else "proxima-paged") if proxima else "stock",
            "block_size": block,
            "kv_bytes": kv_bytes,
            "kv_dtype": kv_dtype,
            "predicted_usable_tokens": cap.usable_tokens,
            "measured_usable_tokens": measured_cap,
            "capacity_match": measured_cap == cap.usable_tokens
            if measured_cap is not None
            else None,
            "mean_live_tokens": live,
            "points": points,
            "notes": notes,
        }
    return out


def _fmt_int(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def format_check(c: dict[str, Any]) -> str:
    """The check as readable text."""

    def pct(v: float | None) -> str:
        return "    –" if v is None else f"{v * 100:5.1f}%"

    def num(v: float | None, d: int = 1) -> str:
        return "  –" if v is None else f"{v:.{d}f}"

    ln = c["lengths"]
    lines = [
        (
            f"workload: prompt mean {ln['prompt_mean']} {ln['prompt_range']}, output mean "
            f"{ln['output_mean']} {ln['output_range']} ({ln['samples']} requests)"
        ),
    ]
    for label, m in c["modes"].items():
        match = {True: "OK", False: "MISMATCH", None: "not measured"}[m["capacity_match"]]
        lines += [
            "",
            (
                f"[{label}] {m['layout']} (page {m['block_size']}), "
                f"KV {m['kv_bytes']:,} bytes {m['kv_dtype']}"
            ),
            (
                f"  usable tokens: predicted {m['predicted_usable_tokens']:,}, measured "
                f"{_fmt_int(m['measured_usable_tokens'])}: {match}"
            ),
            f"  mean live tokens / request: {m['mean_live_tokens']:.1f}",
        ]
        lines += [f"  note: {n}" for n in m["notes"]]
        if m["points"]:
            lines += [
                (
                    "  point  | KV use (pred mean / measured busy mean)"
                    " | peak (pred burst / measured)"
                    " | resident (pred / measured mean)"
                    " | risk (steady, burst) | preemptions"
                ),
            ]
        for p in m["points"]:
            lines.append(
                f"  {p['label']:<6} | {pct(p['predicted_mean_usage']):>17} / "
                f"{pct(p['measured_mean_busy_usage']):<19}"
                f" | {pct(p['predicted_burst_peak_usage']):>13} / "
                f"{pct(p['measured_peak_usage']):<12}"
                f" | {num(p['predicted_resident']):>15} / "
                f"{num(p['measured_mean_running']):<14}"
                f" | {pct(p['predicted_risk_steady']):>9}, "
                f"{pct(p['predicted_risk_burst']):<9}"
                f" | {num(p['measured_preemptions'], 0)}"
            )
    lines.append(
        "\nMeasured KV use is sampled from /metrics (peaks between samples are missed); "
        "'busy mean' averages samples with requests running."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="python -m proxima_bench.planner",
        description="KV capacity, resident requests and preemption risk: "
        "stock blocks vs proxima slots.",
    )
    p.add_argument("--model", help=f"preset ({', '.join(PRESETS)}), config.json or model folder")
    mem = p.add_argument_group("KV memory (one of)")
    mem.add_argument("--kv-bytes", help="KV cache bytes, e.g. 8GiB, 16MiB, 8589934592")
    mem.add_argument("--gpu-memory", help="GPU memory, e.g. 80GiB (with --gpu-util)")
    mem.add_argument("--gpu-util", type=float, default=0.9, help="gpu_memory_utilization (0.9)")
    mem.add_argument("--weights", help="weight bytes (default: estimated from the config)")
    mem.add_argument("--overhead", default="2GiB", help="activations etc. (2GiB, rough)")
    p.add_argument("--kv-dtype", default="auto", help="auto (= model dtype), bf16, fp16, fp32, fp8")
    p.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help="stock block size (16)",
    )
    p.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS)
    lens = p.add_argument_group("lengths (one of)")
    lens.add_argument("--workload", help="baseline, sharegpt or shared-system (with --scale)")
    lens.add_argument("--scale", type=float, default=1.0)
    lens.add_argument("--workload-file", type=Path, help="a workloads.py JSONL file")
    lens.add_argument("--prompt-uniform", help="LO,HI")
    lens.add_argument("--prompt-lognormal", help="MU,SIGMA[,MIN,MAX]")
    lens.add_argument("--output-uniform", help="LO,HI")
    lens.add_argument("--output-lognormal", help="MU,SIGMA[,MIN,MAX]")
    lens.add_argument("--samples", type=int, default=20000, help="draws from a distribution")
    p.add_argument(
        "--concurrency",
        default=",".join(map(str, DEFAULT_CONCURRENCY)),
        help="client concurrencies for the risk table",
    )
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo trials per concurrency")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", type=Path, metavar="RAW.json", help="compare with a serve_ab run")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def lengths_from_args(args: argparse.Namespace) -> Lengths:
    """The length distribution the arguments describe.

    Raises:
        PlannerError: none or several sources, or bad parameters.
    """
    from proxima_bench import workloads as wl

    sources = [
        args.workload is not None,
        args.workload_file is not None,
        any(
            getattr(args, k)
            for k in (
                "prompt_uniform",
                "prompt_lognormal",
                "output_uniform",
                "output_lognormal",
            )
        ),
    ]
    if sum(sources) != 1:
        raise PlannerError(
            "give exactly one length source: --workload, --workload-file or "
            "--prompt-uniform/--prompt-lognormal with --output-uniform/--output-lognormal"
        )
    try:
        if args.workload is not None:
            workload = wl.make_workload(args.workload, args.scale)
            reqs = workload.sample(args.samples, args.seed)
            return lengths_from_arrays(
                f"{args.workload} x{args.scale:g}",
                [r.prompt_len for r in reqs],
                [r.output_len for r in reqs],
            )
        if args.workload_file is not None:
            reqs = wl.read_lengths(args.workload_file)
            return lengths_from_arrays(
                str(args.workload_file),
                [r.prompt_len for r in reqs],
                [r.output_len for r in reqs],
            )
    except wl.WorkloadError as e:
        raise PlannerError(str(e)) from e
    specs = {}
    for part in ("prompt", "output"):
        uni, logn = getattr(args, f"{part}_uniform"), getattr(args, f"{part}_lognormal")
        if bool(uni) == bool(logn):
            raise PlannerError(f"give one of --{part}-uniform or --{part}-lognormal")
        specs[part] = _parse_dist(uni, "uniform") if uni else _parse_dist(logn, "lognormal")
    rng = np.random.default_rng([args.seed, 7])
    prompts = sample_dist(specs["prompt"], rng, args.samples)
    outputs = sample_dist(specs["output"], rng, args.samples)
    (pk, pv), (ok, ov) = specs["prompt"], specs["output"]
    desc = f"prompt {pk}{pv}, output {ok}{ov}"
    return lengths_from_arrays(desc, prompts, outputs)


def kv_bytes_from_args(args: argparse.Namespace, shape: ModelShape) -> int:
    """KV bytes from ``--kv-bytes`` or ``--gpu-memory`` (and weights).

    Raises:
        PlannerError: neither or both given, or weights unknown.
    """
    if bool(args.kv_bytes) == bool(args.gpu_memory):
        raise PlannerError("give one of --kv-bytes or --gpu-memory")
    if args.kv_bytes:
        return parse_bytes(args.kv_bytes)
    if args.weights:
        weights = parse_bytes(args.weights)
    else:
        params = shape.num_params()
        if params is None:
            raise PlannerError("cannot estimate the weights from this config; give --weights")
        weights = params * dtype_bytes(shape.dtype)
    return kv_bytes_from_gpu(
        parse_bytes(args.gpu_memory), args.gpu_util, weights, parse_bytes(args.overhead)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    args = build_parser().parse_args(argv)
    try:
        if args.check is not None:
            try:
                raw = json.loads(args.check.read_text())
            except (OSError, ValueError) as e:
                raise PlannerError(f"cannot read {args.check}: {e}") from e
            result = check(raw, trials=min(args.trials, 1000), seed=args.seed, model=args.model)
            print(json.dumps(result, indent=1) if args.json else format_check(result))
            return 0
        if not args.model:
            raise PlannerError("--model is required (or --check RAW.json)")
        shape = load_shape(args.model)
        kv_bytes = kv_bytes_from_args(args, shape)
        lengths = lengths_from_args(args)
        concs = [int(x) for x in args.concurrency.split(",") if x.strip()]
        if not concs or min(concs) < 1:
            raise PlannerError("--concurrency needs positive integers")
        result = plan(
            shape,
            kv_bytes,
            lengths,
            kv_dtype=args.kv_dtype,
            block_size=args.block_size,
            concurrencies=concs,
            max_num_seqs=args.max_num_seqs,
            trials=args.trials,
            seed=args.seed,
        )
    except PlannerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else format_plan(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
