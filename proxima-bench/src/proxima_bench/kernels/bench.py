"""Attention kernel timing matrix: what 1-token KV pages cost per model shape (GPU).

Times one layer's attention, bf16, for six shapes: MHA (32 query / 32 KV heads), GQA-8
(32 / 8) and GQA-4 (28 / 4) at head size 128; at head size 64 the same KV head counts with 32
query heads (32 / 32, 32 / 8, 32 / 4). Two phases:

- decode: one query token per sequence; 1, 32, 128, 512 sequences over 128, 1k, 4k, 32k tokens
  of KV each (the new token included);
- prefill: query chunks, causal over prior context: 4 x 512 tokens over 0 and 2,048 tokens
  of context, and one 8,192-token prompt.

Cases whose KV exceeds ``--max-kv-gib`` (40) are skipped. Six variants per case: FlashAttention 3
over 16-token pages (stock's default on Hopper, the base of every ratio), FA3 over 1-token pages,
Triton ``unified_attention`` (TRITON_ATTN) over 16- and 1-token pages. 16-token pages and one set
of 1-token pages are a random draw from the pool (what a churned allocator leaves); the other
1-token set gives each request one contiguous run of slots (what proxima's slot pool aims for).

The calls mirror vLLM 0.26.0's backends: the packed NHD cache ``[pages, page, kv_heads,
2 * head]`` both FLASH_ATTN and TRITON_ATTN allocate; FA3's ``scheduler_metadata`` from
``get_scheduler_metadata`` and its ``num_splits`` as ``FlashAttentionMetadataBuilder`` sets them
(32 under full CUDA graphs up to 512 tokens, else 0, FA3's own heuristic); Triton's 3D-kernel
threshold and softmax-segment buffers as ``TritonAttentionMetadataBuilder`` sizes them.

Timing: a variant's calls are captured in one CUDA graph (vLLM replays decode in full graphs, so
no launch overhead; its >512-token prefills run eagerly, where a launch is noise next to the
kernel) over up to 64 replicas of the case's KV (same layout, other pool regions) so a call does
not find its KV in L2, fewer when one call is long; the median of CUDA-event times after
warm-up, over the replicas. Triton compile time stays out of the times (``warm_s`` in a row
holds it). Each case checks a sample of its rows against a float32 torch reference, and per shape
two small mixed-length cases check every row. A failure is recorded in its row, never fatal.

``python -m proxima_bench.kernels.bench --out kernels.jsonl`` writes one JSON row per case and
variant as it goes and prints a ratio table and one summary line per shape and phase;
``--quick`` runs a handful of cases. ``python -m proxima_bench.kernels.report
kernels.jsonl`` renders the markdown for docs/benchmarks.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from proxima_bench.kernels import report as kr

DEVICE = "cuda"
MiB = 1 << 20
GiB = 1 << 30
STOCK_PAGE = 16
"""Stock's block size; the pool is sized in these so both page sizes share its memory."""
TABLE_ALIGN = 64
"""Block-table width multiple; vLLM's table is wider still (max_model_len / page)."""
CG_MAX_TOKENS = 512
"""vLLM's default ``max_cudagraph_capture_size``: min(2 * max_num_seqs, 512)."""
FA3_CG_MAX_SPLITS = 32
"""``attention_config.flash_attn_max_num_splits_for_cuda_graph``'s default."""
ROTATE_BYTES = 256 * MiB
"""KV touched per graph replay at least (H200 L2: 50 MiB): small cases get replicas."""
MAX_REPLICAS = 64
REPLAY_MS = 5.0
"""At most this much work per replay (from an eager probe call): caps compute-bound cases."""
TOLERANCE = 3e-2
"""Max abs error vs the float32 reference for a pass: bf16 output of |x| < 8 rounds by <= 0.016
(a row over one key is one V row, |x| up to ~5); a wrong page or head is off by O(1)."""
SAMPLE_SEQS = 4
SAMPLE_ROWS = 64


@dataclass(frozen=True)
class Shape:
    """Attention heads of one model shape (per GPU)."""

    kind: str
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def name(self) -> str:
        """``GQA-8-hd128``: kind and head size."""
        return f"{self.kind}-hd{self.head_dim}"

    @property
    def slot_bytes(self) -> int:
        """Bytes of one token's K and V in bf16."""
        return 2 * self.kv_heads * self.head_dim * 2


SHAPES: tuple[Shape, ...] = (
    Shape("MHA", 32, 32, 128),
    Shape("GQA-8", 32, 8, 128),
    Shape("GQA-4", 28, 4, 128),
    Shape("MHA", 32, 32, 64),
    Shape("GQA-8", 32, 8, 64),
    Shape("GQA-4", 32, 4, 64),
)


@dataclass(frozen=True)
class Variant:
    """One kernel over one page size and pool layout."""

    kernel: str
    page: int
    layout: str

    @property
    def key(self) -> str:
        """``kernel/page/layout`` as ``kernels_report`` names variants."""
        return f"{self.kernel}/{self.page}/{self.layout}"


VARIANTS: tuple[Variant, ...] = tuple(
    Variant(k, int(p), lay) for k, p, lay in (v.split("/") for v in kr.VARIANTS)
)


@dataclass(frozen=True)
class Case:
    """One batch: per sequence, query tokens and KV length (prior context + queries)."""

    shape: Shape
    phase: str
    ctx: int
    q_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    check: bool = False

    @property
    def batch(self) -> int:
        """Number of sequences."""
        return len(self.q_lens)

    @property
    def q_len(self) -> int:
        """Longest query of the batch."""
        return max(self.q_lens)

    @property
    def slots(self) -> int:
        """Pool slots one replica needs (see ``pool_slots``)."""
        return pool_slots(np.asarray(self.seq_lens))

    @property
    def kv_bytes(self) -> int:
        """Bytes of one replica's pool."""
        return self.slots * self.shape.slot_bytes

    @property
    def label(self) -> str:
        """``MHA-hd128 decode b32 ctx1024`` and the like."""
        key = (self.shape.name, self.phase, self.batch, self.ctx, self.q_len)
        return f"{self.shape.name} {self.phase} {kr.case_label(key)}"


def cdiv(a: Any, b: int) -> Any:
    """Ceiling division of an int or an integer array."""
    return -(-a // b)


def decode_case(shape: Shape, batch: int, ctx: int) -> Case:
    """``batch`` sequences with ``ctx`` tokens of KV each, one query token each."""
    return Case(shape, "decode", ctx, (1,) * batch, (ctx,) * batch)


def prefill_case(shape: Shape, batch: int, chunk: int, ctx: int) -> Case:
    """``batch`` chunks of ``chunk`` query tokens, each over ``ctx`` tokens of prior context."""
    return Case(shape, "prefill", ctx, (chunk,) * batch, (ctx + chunk,) * batch)


def check_cases(shape: Shape) -> list[Case]:
    """Small mixed-length batches whose every output row is checked (partial pages, varlen)."""
    decode = Case(shape, "decode", 300, (1,) * 5, (1, 17, 300, 64, 129), check=True)
    prefill = Case(shape, "prefill", 200, (1, 17, 64), (1, 62, 264), check=True)
    return [decode, prefill]


@dataclass(frozen=True)
class PlanSpec:
    """What the matrix spans."""

    shapes: tuple[Shape, ...]
    phases: tuple[str, ...]
    batches: tuple[int, ...]
    ctxs: tuple[int, ...]
    prefills: tuple[tuple[int, int, int], ...]
    max_kv_bytes: int


def build_plan(spec: PlanSpec) -> tuple[list[Case], list[Case], list[Case]]:
    """Check cases, timed cases (smallest KV first) and cases skipped for their KV size.

    Args:
        spec: Shapes, phases, decode batches and contexts, prefill (batch, chunk, ctx).

    Returns:
        ``(checks, timed, skipped)``; ``timed`` is sorted by KV bytes so a time limit
        drops the largest cases first.
    """
    checks = [c for s in spec.shapes for c in check_cases(s) if c.phase in spec.phases]
    cases: list[Case] = []
    for s in spec.shapes:
        if "decode" in spec.phases:
            cases += [decode_case(s, b, ctx) for b in spec.batches for ctx in spec.ctxs]
        if "prefill" in spec.phases:
            cases += [prefill_case(s, b, chunk, ctx) for b, chunk, ctx in spec.prefills]
    timed = sorted((c for c in cases if c.kv_bytes <= spec.max_kv_bytes), key=lambda c: c.kv_bytes)
    skipped = [c for c in cases if c.kv_bytes > spec.max_kv_bytes]
    return checks, timed, skipped


def pool_slots(seq_lens: np.ndarray) -> int:
    """Slots of a pool that fits the batch in 16-token pages plus a null page (page 0).

    Both page sizes view the same slots: 16-token pages use all of them, 1-token pages
    a subset.
    """
    return STOCK_PAGE * (1 + int(cdiv(np.asarray(seq_lens, dtype=np.int64), STOCK_PAGE).sum()))


def _run_ids(
    blocks: np.ndarray, req: np.ndarray, col: np.ndarray, run_pages: int, rng: np.random.Generator
) -> np.ndarray:
    """Page ids when runs of a request's pages are contiguous and runs lie in random order.

    ``run_pages`` 0 makes each request one run.
    """
    if run_pages <= 0:
        run, within, n_runs = req, col, blocks.size
    else:
        per = cdiv(blocks, run_pages)
        run = (np.cumsum(per) - per)[req] + col // run_pages
        within, n_runs = col % run_pages, int(per.sum())
    sizes = np.bincount(run, minlength=n_runs)
    order = rng.permutation(n_runs)
    start = np.empty(n_runs, dtype=np.int64)
    start[order] = 1 + np.cumsum(sizes[order]) - sizes[order]
    return start[run] + within


def block_table(
    seq_lens: np.ndarray,
    page: int,
    layout: str,
    rng: np.random.Generator,
    run_len: int = 0,
) -> np.ndarray:
    """A block table ``[batch, width]`` (int32) over a pool of ``pool_slots(seq_lens) // page``.

    Page 0 is the null page (padding). ``scattered``: the batch's pages are a random draw from
    the pool. ``contiguous``: each request's pages form runs of ``run_len`` tokens (0: the whole
    request) of consecutive pages, the runs in random pool order.

    Args:
        seq_lens: KV tokens per request.
        page: Tokens per page; divides 16.
        layout: ``scattered`` or ``contiguous``.
        rng: Source of the permutation.
        run_len: Tokens per contiguous run (``contiguous`` only; 0 = whole request).

    Returns:
        The table; its width is a multiple of ``TABLE_ALIGN``.
    """
    if STOCK_PAGE % page:
        raise ValueError(f"page {page} does not divide {STOCK_PAGE}")
    seq = np.asarray(seq_lens, dtype=np.int64)
    blocks = cdiv(seq, page)
    needed = int(blocks.sum())
    req = np.repeat(np.arange(seq.size), blocks)
    col = np.arange(needed) - np.repeat(np.cumsum(blocks) - blocks, blocks)
    if layout == "scattered":
        ids = 1 + rng.permutation(pool_slots(seq) // page - 1)[:needed]
    elif layout == "contiguous":
        ids = _run_ids(blocks, req, col, run_len // page, rng)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    width = TABLE_ALIGN * max(1, int(cdiv(int(blocks.max(initial=0)), TABLE_ALIGN)))
    table = np.zeros((seq.size, width), dtype=np.int32)
    table[req, col] = ids
    return table


def token_slots(row: np.ndarray, seq_len: int, page: int) -> np.ndarray:
    """Pool slots of a request's tokens, in order, from its block-table row."""
    pages = row[: cdiv(seq_len, page)].astype(np.int64)
    return (pages[:, None] * page + np.arange(page)).reshape(-1)[:seq_len]


def replicas(kv_bytes: int, rotate_bytes: int = ROTATE_BYTES, cap: int = MAX_REPLICAS) -> int:
    """Copies of a case's KV one graph replay walks so its KV is not L2-resident."""
    return int(min(cap, max(1, cdiv(rotate_bytes, max(kv_bytes, 1)))))


def fa3_num_splits(num_tokens: int) -> int:
    """``num_splits`` vLLM passes FA3: the CUDA-graph cap up to 512 tokens, else 0 (heuristic)."""
    return FA3_CG_MAX_SPLITS if num_tokens <= CG_MAX_TOKENS else 0


def capture_sizes(max_size: int = CG_MAX_TOKENS) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to ``max_size``."""
    sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    return sorted(set(sizes))


def triton_seq_threshold_3d(kv_heads: int, min_grid_2d: int = 128) -> int:
    """Batch size up to which TRITON_ATTN decodes with the 3D kernel (snapped to a capture size)."""
    target = min_grid_2d // kv_heads
    return min(capture_sizes(), key=lambda x: abs(x - target))


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """Causal attention in float32 of the last ``len(q)`` positions over all of ``k``/``v``.

    Args:
        q: ``[L, heads, D]``, the sequence's last L tokens.
        k: ``[N, kv_heads, D]``, N >= L; query head h reads KV head h // (heads / kv_heads).
        v: Like ``k``.
        scale: Softmax scale.

    Returns:
        ``[L, heads, D]`` float32.
    """
    n, length = k.shape[0], q.shape[0]
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    s = torch.einsum("lhd,nhd->hln", q.float(), kf) * scale
    pos = torch.arange(n - length, n, device=q.device)
    s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > pos[:, None], float("-inf"))
    return torch.einsum("hln,nhd->lhd", s.softmax(-1), vf)


def sample_rows(case: Case) -> list[tuple[int, int]]:
    """(sequence, trailing query rows) to check: all of a check case, a sample otherwise."""
    if case.check:
        return list(enumerate(case.q_lens))
    return [(i, min(q, SAMPLE_ROWS)) for i, q in enumerate(case.q_lens[:SAMPLE_SEQS])]


# ---------------------------------------------------------------- GPU side


class Pool:
    """One random bf16 buffer every case views as its KV cache (filled once)."""

    def __init__(self, nbytes: int, device: torch.device, seed: int) -> None:
        self.data = torch.empty(cdiv(nbytes, 2), dtype=torch.bfloat16, device=device)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        self.data.normal_(generator=gen)

    def slots(self, shape: Shape, n_slots: int) -> torch.Tensor:
        """``[n_slots, kv_heads, 2 * head]``: K in the first half of the last dim, V after."""
        width = 2 * shape.head_dim
        return self.data[: n_slots * shape.kv_heads * width].view(n_slots, shape.kv_heads, width)

    def kv(self, shape: Shape, n_slots: int, page: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V views ``[n_slots / page, page, kv_heads, head]``, split as vLLM's backends do."""
        paged = self.slots(shape, n_slots).view(
            n_slots // page, page, shape.kv_heads, 2 * shape.head_dim
        )
        return paged[..., : shape.head_dim], paged[..., shape.head_dim :]


@dataclass
class Inputs:
    """A case's device tensors, shared by all its variants."""

    q: torch.Tensor
    out: torch.Tensor
    cu_q: torch.Tensor
    seq_used: torch.Tensor
    scales: torch.Tensor
    max_q: int
    max_k: int
    scale: float


def make_inputs(case: Case, device: torch.device) -> Inputs:
    """Random queries, output buffer and the metadata tensors vLLM builds per step."""
    s = case.shape
    cu = np.concatenate([[0], np.cumsum(case.q_lens)]).astype(np.int32)
    q = torch.randn(int(cu[-1]), s.heads, s.head_dim, dtype=torch.bfloat16, device=device)
    one = torch.tensor(1.0, dtype=torch.float32, device=device)  # a layer's _k_scale/_v_scale
    return Inputs(
        q=q,
        out=torch.empty_like(q),
        cu_q=torch.as_tensor(cu, device=device),
        seq_used=torch.as_tensor(np.asarray(case.seq_lens, dtype=np.int32), device=device),
        scales=one.expand(case.batch, s.kv_heads),
        max_q=case.q_len,
        max_k=max(case.seq_lens),
        scale=1.0 / math.sqrt(s.head_dim),
    )


Call = Callable[[], None]


def fa3_calls(
    case: Case,
    inp: Inputs,
    k: torch.Tensor,
    v: torch.Tensor,
    tables: Sequence[torch.Tensor],
    page: int,
) -> list[Call]:
    """FlashAttention 3 calls as ``FlashAttentionImpl.forward`` makes them, one per table."""
    from vllm.utils.torch_utils import canonicalize_singleton_dim_strides
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    s = case.shape
    k, v = canonicalize_singleton_dim_strides(k), canonicalize_singleton_dim_strides(v)
    num_splits = fa3_num_splits(inp.q.shape[0])
    meta = get_scheduler_metadata(
        batch_size=case.batch,
        max_seqlen_q=inp.max_q,
        max_seqlen_k=inp.max_k,
        num_heads_q=s.heads,
        num_heads_kv=s.kv_heads,
        headdim=s.head_dim,
        cache_seqlens=inp.seq_used,
        qkv_dtype=torch.bfloat16,
        cu_seqlens_q=inp.cu_q,
        page_size=page,
        causal=True,
        window_size=(-1, -1),
        num_splits=num_splits,
    )

    def make(table: torch.Tensor) -> Call:
        def call() -> None:
            flash_attn_varlen_func(
                q=inp.q,
                k=k,
                v=v,
                out=inp.out,
                cu_seqlens_q=inp.cu_q,
                max_seqlen_q=inp.max_q,
                seqused_k=inp.seq_used,
                max_seqlen_k=inp.max_k,
                softmax_scale=inp.scale,
                causal=True,
                alibi_slopes=None,
                window_size=[-1, -1],
                block_table=table,
                softcap=0,
                scheduler_metadata=meta,
                fa_version=3,
                q_descale=inp.scales,
                k_descale=inp.scales,
                v_descale=inp.scales,
                dynamic_causal=None,
                num_splits=num_splits,
                s_aux=None,
                mask_mod=None,
                aux_tensors=None,
            )

        return call

    return [make(t) for t in tables]


def triton_calls(
    case: Case,
    inp: Inputs,
    k: torch.Tensor,
    v: torch.Tensor,
    tables: Sequence[torch.Tensor],
    page: int,
) -> list[Call]:
    """Triton ``unified_attention`` calls as ``TritonAttentionImpl.forward`` makes them."""
    from vllm.v1.attention.backends.triton_attn import (
        MIN_LAUNCH_GRID_SIZE_2D,
        NUM_PAR_SOFTMAX_SEGMENTS,
    )
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention
    from vllm.v1.kv_cache_interface import KVQuantMode

    s, dev = case.shape, inp.q.device
    threshold = triton_seq_threshold_3d(s.kv_heads, MIN_LAUNCH_GRID_SIZE_2D)
    segs = NUM_PAR_SOFTMAX_SEGMENTS
    padded = 1 << (s.head_dim - 1).bit_length()
    f32 = torch.float32
    segm_out = torch.empty(threshold, s.heads, segs, padded, dtype=f32, device=dev)
    segm_max = torch.empty(threshold, s.heads, segs, dtype=f32, device=dev)
    segm_sum = torch.empty(threshold, s.heads, segs, dtype=f32, device=dev)

    def make(table: torch.Tensor) -> Call:
        def call() -> None:
            unified_attention(
                q=inp.q,
                k=k,
                v=v,
                out=inp.out,
                cu_seqlens_q=inp.cu_q,
                max_seqlen_q=inp.max_q,
                seqused_k=inp.seq_used,
                max_seqlen_k=inp.max_k,
                softmax_scale=inp.scale,
                causal=True,
                alibi_slopes=None,
                use_alibi_sqrt=False,
                window_size=(-1, -1),
                block_table=table,
                softcap=0,
                q_descale=None,
                k_descale=inp.scales,
                v_descale=inp.scales,
                seq_threshold_3D=threshold,
                num_par_softmax_segments=segs,
                softmax_segm_output=segm_out,
                softmax_segm_max=segm_max,
                softmax_segm_expsum=segm_sum,
                sinks=None,
                output_scale=None,
                mm_prefix_range=None,
                rswa_prefix_lens=None,
                rswa_window=None,
                kv_quant_mode=KVQuantMode.NONE,
                k_scale_cache=None,
                v_scale_cache=None,
                chunk_lookback=-1,
                use_td=False,
                mm_prefix_clamp_sliding_window=False,
            )

        return call

    return [make(t) for t in tables]


@dataclass(frozen=True)
class Timing:
    """Median ms per call and how it was measured."""

    ms: float
    iters: int
    replicas: int
    graphed: bool
    warm_s: float


def _event_ms(run: Call) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _capture(calls: Sequence[Call]) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    return graph


def _warm(calls: Sequence[Call]) -> None:
    """Run each call once on a side stream, as CUDA-graph capture wants before capturing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def time_calls(
    calls: Sequence[Call], target_ms: float, min_iters: int, max_iters: int, graph: bool
) -> Timing:
    """Warm up (compiles), capture the calls in one CUDA graph, time replays with events.

    Replicas only keep memory-bound calls out of L2; a compute-bound call (a long prefill)
    needs none, so the replicas are cut to about ``REPLAY_MS`` of work per replay.

    Args:
        calls: One call per KV replica; a replay runs them in turn.
        target_ms: Timed GPU time to aim for (iterations = target / first replay).
        min_iters: Fewest timed replays.
        max_iters: Most timed replays.
        graph: Capture a CUDA graph; without one (or if capture fails) calls run eagerly.

    Returns:
        Median ms of one replay divided by the replicas it ran.
    """
    t0 = time.perf_counter()
    _warm(calls[:1])  # compiles; the other calls differ only in their block table
    probe = _event_ms(calls[0])  # eager: an upper bound on one call's GPU time
    calls = calls[: max(1, min(len(calls), int(REPLAY_MS // max(probe, 1e-3))))]
    warm_s = time.perf_counter() - t0

    def eager() -> None:
        for c in calls:
            c()

    run, captured = eager, None
    if graph:
        try:
            captured = _capture(calls)
            run = captured.replay
        except Exception:  # e.g. a kernel that is not capturable: time it eagerly
            torch.cuda.synchronize()
    times = [_event_ms(run)]
    iters = int(min(max_iters, max(min_iters, target_ms // max(times[0], 1e-3))))
    times += [_event_ms(run) for _ in range(iters - 1)]
    ms = float(np.median(times)) / len(calls)
    del captured
    return Timing(ms=ms, iters=iters, replicas=len(calls), graphed=run is not eager, warm_s=warm_s)


def max_abs_error(
    case: Case, inp: Inputs, flat_kv: torch.Tensor, table: np.ndarray, page: int
) -> float:
    """Largest |kernel - reference| over ``sample_rows(case)`` (``nan`` if any output is)."""
    d = case.shape.head_dim
    ends = np.cumsum(case.q_lens)
    errs = []
    for i, rows in sample_rows(case):
        slots = token_slots(table[i], case.seq_lens[i], page)
        kv = flat_kv[torch.as_tensor(slots, device=flat_kv.device)]
        lo, hi = int(ends[i]) - rows, int(ends[i])
        ref = reference_attention(inp.q[lo:hi], kv[..., :d], kv[..., d:], inp.scale)
        errs.append((inp.out[lo:hi].float() - ref).abs().max().item())
    return float(np.max(errs))


@dataclass(frozen=True)
class Options:
    """Run-wide settings from the command line."""

    target_ms: float
    min_iters: int
    max_iters: int
    graph: bool
    run_len: int
    device_name: str


def _base_row(case: Case, variant: Variant, n_rep: int, device_name: str) -> dict[str, Any]:
    s = case.shape
    return {
        "shape": s.name,
        "shape_class": s.kind,
        "heads": s.heads,
        "kv_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "phase": case.phase,
        "batch": case.batch,
        "ctx": case.ctx,
        "q_len": case.q_len,
        "tokens": int(sum(case.q_lens)),
        "kv_gib": round(case.kv_bytes / GiB, 4),
        "check": case.check,
        "kernel": variant.kernel,
        "page": variant.page,
        "layout": variant.layout,
        "slots": variant.layout,  # the key engine_report's older kernel table reads
        "replicas": n_rep,
        "ms": None,
        "max_abs_err": None,
        "ok": False,
        "error": None,
        "device": device_name,
    }


def replica_tables(
    table: np.ndarray, pages_per_replica: int, n_rep: int, device: torch.device
) -> list[torch.Tensor]:
    """The table shifted to each replica's pool region, one contiguous tensor per replica."""
    base = torch.as_tensor(table, device=device)
    offsets = torch.arange(n_rep, dtype=torch.int32, device=device) * pages_per_replica
    stacked = base[None] + offsets[:, None, None]
    return list(stacked.unbind(0))


def run_variant(
    case: Case, variant: Variant, inp: Inputs, pool: Pool, table: np.ndarray, opts: Options
) -> dict[str, Any]:
    """Time one variant of a case (unless it is a check case) and check its output."""
    n_rep = 1 if case.check else replicas(case.kv_bytes)
    row = _base_row(case, variant, n_rep, opts.device_name)
    page, slots = variant.page, case.slots
    try:
        k, v = pool.kv(case.shape, slots * n_rep, page)
        tables = replica_tables(table, slots // page, n_rep, inp.q.device)
        make = fa3_calls if variant.kernel == "fa3" else triton_calls
        calls = make(case, inp, k, v, tables, page)
        if not case.check:
            t = time_calls(calls, opts.target_ms, opts.min_iters, opts.max_iters, opts.graph)
            row.update(ms=round(t.ms, 6), iters=t.iters, replicas=t.replicas, graphed=t.graphed)
            row["warm_s"] = round(t.warm_s, 3)
        inp.out.fill_(float("nan"))
        calls[0]()
        torch.cuda.synchronize()
        err = max_abs_error(case, inp, pool.slots(case.shape, slots), table, page)
        if math.isnan(err):
            row["error"] = "output has NaN (rows not written?)"
        else:
            row.update(max_abs_err=err, ok=err < TOLERANCE)
    except Exception as e:  # recorded, not fatal
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    return row


def run_case(
    case: Case, pool: Pool, opts: Options, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """All variants of one case; the layouts are built once and shared by both kernels."""
    inp = make_inputs(case, pool.data.device)
    seq = np.asarray(case.seq_lens)
    tables: dict[tuple[int, str], np.ndarray] = {}
    rows = []
    for variant in VARIANTS:
        key = (variant.page, variant.layout)
        if key not in tables:
            tables[key] = block_table(seq, variant.page, variant.layout, rng, opts.run_len)
        rows.append(run_variant(case, variant, inp, pool, tables[key], opts))
    return rows


def _cell(row: dict[str, Any] | None, ratio: float | None, check: bool) -> str:
    if row is None or not row.get("ok"):
        return f"{'FAIL':>8}"
    if check:
        return f"{row['max_abs_err']:>8.1e}"
    return f"{ratio:>8.3f}" if ratio is not None else f"{'-':>8}"


def case_line(case: Case, rows: list[dict[str, Any]]) -> str:
    """One stdout line: FA3-16 ms and each other variant's ratio to it (errors for checks)."""
    by = {kr.variant_of(r): r for r in rows}
    rat = kr.ratios({v: r["ms"] for v, r in by.items() if r.get("ok") and r.get("ms")})
    cells = [_cell(by.get(v), rat.get(v), case.check) for v in kr.VARIANTS]
    base = by.get(kr.BASE)
    if not case.check and base is not None and base.get("ok") and base.get("ms"):
        cells[0] = f"{base['ms']:>8.4f}"
    errs = [r["max_abs_err"] for r in rows if r.get("max_abs_err") is not None]
    worst = f"{max(errs):.1e}" if errs else "-"
    return f"{case.label:<40} {' '.join(cells)}  {worst}"


def header_line() -> str:
    """Column heads for ``case_line`` (check cases show max abs errors instead of ratios)."""
    cols = " ".join(f"{kr.SHORT[v]:>8}" for v in kr.VARIANTS)
    return f"{'case (FA3-16 in ms, others / FA3-16)':<40} {cols}  max err"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _prefills(text: str) -> tuple[tuple[int, int, int], ...]:
    """``4x512@0,1x8192@0`` -> ((4, 512, 0), (1, 8192, 0)): batch x chunk @ prior context."""
    out = []
    for item in filter(None, text.split(",")):
        bc, _, ctx = item.partition("@")
        b, _, chunk = bc.partition("x")
        out.append((int(b), int(chunk), int(ctx or 0)))
    return tuple(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line; ``--quick`` overrides shapes, batches, contexts and prefills."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("kernels.jsonl"), help="JSONL rows")
    p.add_argument("--quick", action="store_true", help="a handful of cases (2 shapes)")
    p.add_argument(
        "--max-seconds", type=float, default=0, help="start no case past this (0: no limit)"
    )
    names = ",".join(s.name for s in SHAPES)
    p.add_argument("--shapes", default=names, help=f"comma list of {names}")
    p.add_argument("--phases", default="decode,prefill")
    p.add_argument("--batches", default="1,32,128,512", help="decode batch sizes")
    p.add_argument("--ctx", default="128,1024,4096,32768", help="decode KV lengths")
    p.add_argument(
        "--prefill", default="4x512@0,4x512@2048,1x8192@0", help="BATCHxCHUNK@CONTEXT list"
    )
    p.add_argument("--max-kv-gib", type=float, default=40.0, help="skip cases with more KV")
    p.add_argument("--target-ms", type=float, default=10.0, help="timed GPU ms per variant")
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=10)
    p.add_argument("--no-graph", action="store_true", help="time eager launches (adds launch cost)")
    p.add_argument("--run-len", type=int, default=0, help="contiguous runs in tokens (0: request)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="print every row as KERNEL {json}")
    args = p.parse_args(argv)
    if args.quick:
        args.shapes, args.batches, args.ctx = "MHA-hd128,GQA-8-hd128", "32,128", "1024,4096"
        args.prefill = "4x512@2048"
    return args


def plan_spec(args: argparse.Namespace) -> PlanSpec:
    """The matrix the command line asks for."""
    by_name = {s.name: s for s in SHAPES}
    unknown = [n for n in args.shapes.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {list(by_name)}")
    return PlanSpec(
        shapes=tuple(by_name[n] for n in args.shapes.split(",")),
        phases=tuple(args.phases.split(",")),
        batches=_ints(args.batches),
        ctxs=_ints(args.ctx),
        prefills=_prefills(args.prefill),
        max_kv_bytes=int(args.max_kv_gib * GiB),
    )


def pool_bytes(cases: Sequence[Case]) -> int:
    """Pool size the cases need, replicas included."""
    return max(c.kv_bytes * (1 if c.check else replicas(c.kv_bytes)) for c in cases)


def _cuda_alive() -> bool:
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # a sticky CUDA error: every later call would fail too
        return False


def main(argv: list[str] | None = None) -> None:
    """Run the matrix: rows to ``--out`` as they finish, a table and summaries to stdout."""
    args = parse_args(argv)
    t_start = time.perf_counter()
    checks, timed, skipped = build_plan(plan_spec(args))
    for c in skipped:
        print(f"skip {c.label}: KV {c.kv_bytes / GiB:.1f} GiB > {args.max_kv_gib} GiB")
    cases = checks + timed
    if not cases:
        raise SystemExit("no cases")
    device = torch.device(DEVICE)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    pool = Pool(pool_bytes(cases), device, args.seed)
    opts = Options(
        target_ms=args.target_ms,
        min_iters=args.min_iters,
        max_iters=args.max_iters,
        graph=not args.no_graph,
        run_len=args.run_len,
        device_name=torch.cuda.get_device_name(device),
    )
    gib = pool.data.numel() * 2 / GiB
    print(f"{len(checks)} check + {len(timed)} timed cases, KV pool {gib:.1f} GiB")
    print(header_line(), flush=True)
    done: list[dict[str, Any]] = []
    with args.out.open("w") as f:
        for n, case in enumerate(cases):
            if args.max_seconds and time.perf_counter() - t_start > args.max_seconds:
                print(f"--max-seconds {args.max_seconds:g} reached: {len(cases) - n} cases not run")
                break
            rows = run_case(case, pool, opts, rng)
            for r in rows:
                f.write(json.dumps(r) + "\n")
                if args.verbose:
                    print("KERNEL", json.dumps(r))
            f.flush()
            done += rows
            print(case_line(case, rows), flush=True)
            torch.cuda.empty_cache()
            if not _cuda_alive():
                print("CUDA context lost (sticky error): stopping; rows so far are written")
                break
    for line in kr.summary_lines(done):
        print(line)
    failed = [r for r in done if not r["ok"]]
    print(f"{len(done)} rows, {len(failed)} failed, {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
