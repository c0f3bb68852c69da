"""Decode-attention kernel time: 1-token pages vs stock's 16-token blocks (GPU).

Times one layer's decode attention (Llama-2-7B shape: 32 query and KV heads,
head size 128, bf16) for 1, 64 and 512 sequences with
- Triton ``unified_attention`` over 16-token blocks (stock TRITON_ATTN),
- the same kernel over 1-token pages with each request's slots contiguous
  (what proxima's slot pool aims for) and scattered (a random permutation),
- FlashAttention 3 over 16-token blocks (stock's default on Hopper) and, as a
  probe, over 1-token pages.
Each output is checked against a torch reference on the same K/V.

``python -m vllm_proxima.bench.kernels --out results.jsonl``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np
import torch

HEADS = 32
KV_HEADS = 32
HEAD = 128


def _layout(
    seq_lens: np.ndarray, block: int, scattered: bool, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Block table ``[B, max_blocks]`` over a pool just large enough (+1 null page)."""
    blocks_per = -(-seq_lens // block)
    total = int(blocks_per.sum())
    ids = np.arange(1, total + 1, dtype=np.int32)
    if block > 1 or scattered:
        # Stock's block pool hands out blocks in free-list order; after churn
        # a request's blocks are not adjacent: shuffle whole pages.
        ids = rng.permutation(ids).astype(np.int32) if scattered or block > 1 else ids
    table = np.zeros((seq_lens.size, int(blocks_per.max())), dtype=np.int32)
    start = 0
    for i, n in enumerate(blocks_per.tolist()):
        table[i, :n] = ids[start : start + n]
        start += n
    return table, total + 1


def _reference(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    table: np.ndarray,
    seq_lens: np.ndarray,
    block: int,
) -> torch.Tensor:
    out = torch.empty_like(q)
    for i, n in enumerate(seq_lens.tolist()):
        pages = torch.as_tensor(table[i, : -(-n // block)], device=q.device, dtype=torch.long)
        k = k_pages[pages].reshape(-1, KV_HEADS, HEAD)[:n].float()
        v = v_pages[pages].reshape(-1, KV_HEADS, HEAD)[:n].float()
        s = torch.einsum("hd,nhd->hn", q[i].float(), k) / math.sqrt(HEAD)
        out[i] = torch.einsum("hn,nhd->hd", s.softmax(-1), v).to(q.dtype)
    return out


def _time(fn: Any, iters: int = 50) -> float:
    """Median milliseconds over ``iters`` launches (CUDA events), after warm-up."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def run_triton(
    q: torch.Tensor,
    seq_lens: np.ndarray,
    table: np.ndarray,
    num_pages: int,
    block: int,
    k_src: torch.Tensor,
    v_src: torch.Tensor,
) -> tuple[float, torch.Tensor]:
    from vllm.v1.attention.backends.triton_attn import (
        MIN_LAUNCH_GRID_SIZE_2D,
        NUM_PAR_SOFTMAX_SEGMENTS,
    )
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    dev = q.device
    b = seq_lens.size
    phys = torch.zeros(num_pages, block, KV_HEADS, 2 * HEAD, dtype=q.dtype, device=dev)
    phys[..., :HEAD] = k_src
    phys[..., HEAD:] = v_src
    key_cache, value_cache = phys[..., :HEAD], phys[..., HEAD:]
    threshold = MIN_LAUNCH_GRID_SIZE_2D // KV_HEADS
    segs = NUM_PAR_SOFTMAX_SEGMENTS
    segm_out = torch.empty(threshold, HEADS, segs, HEAD, dtype=torch.float32, device=dev)
    segm_max = torch.empty(threshold, HEADS, segs, dtype=torch.float32, device=dev)
    segm_sum = torch.empty(threshold, HEADS, segs, dtype=torch.float32, device=dev)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
    used = torch.as_tensor(seq_lens, dtype=torch.int32, device=dev)
    bt = torch.as_tensor(table, device=dev)
    out = torch.empty_like(q)
    ones = torch.ones(1, dtype=torch.float32, device=dev).expand(b, KV_HEADS)

    def fn() -> None:
        unified_attention(
            q=q,
            k=key_cache,
            v=value_cache,
            out=out,
            cu_seqlens_q=cu_q,
            max_seqlen_q=1,
            seqused_k=used,
            max_seqlen_k=int(seq_lens.max()),
            softmax_scale=1 / math.sqrt(HEAD),
            causal=True,
            window_size=(-1, -1),
            block_table=bt,
            softcap=0,
            q_descale=None,
            k_descale=ones,
            v_descale=ones,
            seq_threshold_3D=threshold,
            num_par_softmax_segments=segs,
            softmax_segm_output=segm_out,
            softmax_segm_max=segm_max,
            softmax_segm_expsum=segm_sum,
        )

    ms = _time(fn)
    fn()
    return ms, out.clone()


def run_fa3(
    q: torch.Tensor,
    seq_lens: np.ndarray,
    table: np.ndarray,
    num_pages: int,
    block: int,
    k_src: torch.Tensor,
    v_src: torch.Tensor,
) -> tuple[float, torch.Tensor]:
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    dev = q.device
    b = seq_lens.size
    k_cache = k_src.contiguous()
    v_cache = v_src.contiguous()
    cu_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
    used = torch.as_tensor(seq_lens, dtype=torch.int32, device=dev)
    bt = torch.as_tensor(table, device=dev)
    out = torch.empty_like(q)

    def fn() -> None:
        flash_attn_varlen_func(
            q=q,
            k=k_cache,
            v=v_cache,
            max_seqlen_q=1,
            cu_seqlens_q=cu_q,
            max_seqlen_k=int(seq_lens.max()),
            seqused_k=used,
            softmax_scale=1 / math.sqrt(HEAD),
            causal=True,
            block_table=bt,
            out=out,
            fa_version=3,
        )

    ms = _time(fn)
    fn()
    return ms, out.clone()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="kernels.jsonl")
    parser.add_argument("--batches", default="1,64,512")
    parser.add_argument("--ctx", default="64-512,2048", help="'lo-hi' uniform or a fixed length")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    rows = []
    for ctx in args.ctx.split(","):
        for b in [int(x) for x in args.batches.split(",")]:
            rng = np.random.default_rng(b)
            if "-" in ctx:
                lo, hi = (int(x) for x in ctx.split("-"))
                seq_lens = rng.integers(lo, hi + 1, size=b).astype(np.int32)
            else:
                seq_lens = np.full(b, int(ctx), dtype=np.int32)
            q = torch.randn(b, HEADS, HEAD, dtype=torch.bfloat16, device=dev)
            cases = [
                ("triton", 16, False),
                ("triton", 1, False),
                ("triton", 1, True),
                ("fa3", 16, False),
                ("fa3", 1, False),
            ]
            for kernel, block, scattered in cases:
                row: dict[str, Any] = {
                    "kernel": kernel,
                    "page": block,
                    "slots": "scattered" if scattered else "contiguous",
                    "batch": b,
                    "ctx": ctx,
                    "mean_seq_len": float(seq_lens.mean()),
                }
                try:
                    table, num_pages = _layout(seq_lens, block, scattered, rng)
                    k_src = torch.randn(
                        num_pages, block, KV_HEADS, HEAD, dtype=torch.bfloat16, device=dev
                    )
                    v_src = torch.randn_like(k_src)
                    runner = run_triton if kernel == "triton" else run_fa3
                    t0 = time.perf_counter()
                    ms, out = runner(q, seq_lens, table, num_pages, block, k_src, v_src)
                    row["ms"] = round(ms, 5)
                    check = min(b, 16)
                    ref = _reference(
                        q[:check], k_src, v_src, table[:check], seq_lens[:check], block
                    )
                    row["max_abs_err_vs_torch"] = float(
                        (out[:check].float() - ref.float()).abs().max()
                    )
                    row["wall_s"] = round(time.perf_counter() - t0, 2)
                    row["ok"] = row["max_abs_err_vs_torch"] < 2e-2
                except Exception as e:  # report, keep going
                    row["ok"] = False
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                rows.append(row)
                print("KERNEL", json.dumps(row), flush=True)
                torch.cuda.empty_cache()
    with open(args.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
