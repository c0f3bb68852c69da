"""bench/kernels.py's pure parts: pool layouts, block tables, the torch reference, the plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from proxima_bench.kernels import bench as k
from proxima_bench.kernels import report as kr

SEQ_LENS = np.array([1, 15, 16, 17, 300, 64, 129, 0, 4096], dtype=np.int64)


def _slots(table: np.ndarray, seq_lens: np.ndarray, page: int) -> list[np.ndarray]:
    return [k.token_slots(table[i], int(n), page) for i, n in enumerate(seq_lens)]


@pytest.mark.parametrize(
    ("page", "layout"), [(16, "scattered"), (1, "scattered"), (1, "contiguous"), (16, "contiguous")]
)
def test_each_request_covers_its_context_in_its_own_slots(page: int, layout: str) -> None:
    table = k.block_table(SEQ_LENS, page, layout, np.random.default_rng(1))
    pool = k.pool_slots(SEQ_LENS)
    assert table.dtype == np.int32
    assert table.shape[0] == SEQ_LENS.size and table.shape[1] % k.TABLE_ALIGN == 0
    slots = _slots(table, SEQ_LENS, page)
    assert [s.size for s in slots] == SEQ_LENS.tolist()
    flat = np.concatenate(slots)
    assert np.unique(flat).size == flat.size  # no slot serves two tokens
    assert flat.min() >= page and flat.max() < pool  # never the null page, never past the pool
    for i, n in enumerate(SEQ_LENS):  # past a request's pages the row is null-page padding
        assert not table[i, k.cdiv(int(n), page) :].any()


def test_scattered_16_token_pages_are_a_permutation_of_the_pool() -> None:
    table = k.block_table(SEQ_LENS, 16, "scattered", np.random.default_rng(2))
    blocks = k.cdiv(SEQ_LENS, 16)
    ids = np.concatenate([table[i, :b] for i, b in enumerate(blocks)])
    pages = k.pool_slots(SEQ_LENS) // 16
    assert sorted(ids.tolist()) == list(range(1, pages))
    assert ids.tolist() != sorted(ids.tolist())  # actually shuffled


def test_scattered_1_token_pages_are_not_runs() -> None:
    table = k.block_table(SEQ_LENS, 1, "scattered", np.random.default_rng(3))
    slots = k.token_slots(table[-1], 4096, 1)
    assert (np.diff(slots) == 1).mean() < 0.05


def test_contiguous_1_token_pages_are_one_run_per_request() -> None:
    table = k.block_table(SEQ_LENS, 1, "contiguous", np.random.default_rng(4))
    starts = []
    for s in _slots(table, SEQ_LENS, 1):
        if s.size:
            assert (np.diff(s) == 1).all()
            starts.append(int(s[0]))
    assert starts != sorted(starts)  # requests lie in random pool order
    # Packed from slot 1: the requests tile [1, 1 + total) with no gaps.
    flat = np.sort(np.concatenate(_slots(table, SEQ_LENS, 1)))
    assert flat.tolist() == list(range(1, 1 + int(SEQ_LENS.sum())))


def test_contiguous_runs_of_a_given_length() -> None:
    table = k.block_table(SEQ_LENS, 1, "contiguous", np.random.default_rng(5), run_len=64)
    for s in _slots(table, SEQ_LENS, 1):
        for start in range(0, s.size, 64):
            assert (np.diff(s[start : start + 64]) == 1).all()
    long = k.token_slots(table[-1], 4096, 1)
    assert (np.diff(long) != 1).sum() >= 32  # 64 runs, mostly not adjacent


def test_block_table_refuses_bad_arguments() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        k.block_table(SEQ_LENS, 3, "scattered", rng)
    with pytest.raises(ValueError):
        k.block_table(SEQ_LENS, 1, "striped", rng)


def test_replica_tables_shift_into_disjoint_pool_regions() -> None:
    seq = np.array([5, 40])
    table = k.block_table(seq, 1, "scattered", np.random.default_rng(6))
    slots = k.pool_slots(seq)
    reps = k.replica_tables(table, slots, 3, torch.device("cpu"))
    assert len(reps) == 3 and all(t.is_contiguous() and t.dtype == torch.int32 for t in reps)
    for r, t in enumerate(reps):
        used = t.numpy()[table > 0]
        assert used.min() >= r * slots and used.max() < (r + 1) * slots


def _direct_attention(
    q: torch.Tensor, key: torch.Tensor, val: torch.Tensor, scale: float
) -> torch.Tensor:
    """Loop version: query row t of L sits at position N - L + t, sees keys 0..that position."""
    n, length, heads = key.shape[0], q.shape[0], q.shape[1]
    group = heads // key.shape[1]
    out = torch.zeros(length, heads, q.shape[2], dtype=torch.float64)
    for t in range(length):
        pos = n - length + t
        for h in range(heads):
            kh, vh = key[: pos + 1, h // group].double(), val[: pos + 1, h // group].double()
            logits = (kh @ q[t, h].double()) * scale
            w = torch.exp(logits - logits.max())
            out[t, h] = (w / w.sum()) @ vh
    return out


@pytest.mark.parametrize(("heads", "kv_heads", "length"), [(8, 2, 1), (7, 1, 5), (4, 4, 9)])
def test_reference_matches_a_direct_softmax_with_gqa(
    heads: int, kv_heads: int, length: int
) -> None:
    g = torch.Generator().manual_seed(0)
    n, d = 11, 16
    q = torch.randn(length, heads, d, generator=g)
    key = torch.randn(n, kv_heads, d, generator=g)
    val = torch.randn(n, kv_heads, d, generator=g)
    got = k.reference_attention(q, key, val, 0.3)
    assert got.dtype == torch.float32 and got.shape == (length, heads, d)
    torch.testing.assert_close(got.double(), _direct_attention(q, key, val, 0.3), atol=1e-5, rtol=0)


def test_pool_views_share_memory_across_page_sizes() -> None:
    shape = k.Shape("GQA-8", 8, 2, 16)
    pool = k.Pool(64 * shape.slot_bytes, torch.device("cpu"), seed=0)
    flat = pool.slots(shape, 64)
    k16, v16 = pool.kv(shape, 64, 16)
    k1, v1 = pool.kv(shape, 64, 1)
    assert k16.shape == (4, 16, 2, 16) and k1.shape == (64, 1, 2, 16)
    torch.testing.assert_close(k16[2, 5], flat[37, :, :16])
    torch.testing.assert_close(v16[2, 5], flat[37, :, 16:])
    torch.testing.assert_close(k1[37, 0], k16[2, 5])
    assert k1.stride(-1) == 1 and v1.stride(-1) == 1  # what FA3 and Triton require


def test_max_abs_error_is_zero_for_the_reference_and_nan_for_unwritten_output() -> None:
    shape = k.Shape("GQA-4", 8, 2, 16)
    case = k.Case(shape, "prefill", 10, (1, 3), (5, 13), check=True)
    cpu = torch.device("cpu")
    pool = k.Pool(case.kv_bytes, cpu, seed=1)
    pool.data = pool.data.float()  # so the bf16 rounding of out does not enter
    inp = k.make_inputs(case, cpu)
    inp.q, inp.out = inp.q.float(), inp.out.float()
    table = k.block_table(np.asarray(case.seq_lens), 1, "scattered", np.random.default_rng(0))
    flat = pool.slots(shape, case.slots)
    inp.out.fill_(float("nan"))
    assert math.isnan(k.max_abs_error(case, inp, flat, table, 1))
    start = 0
    for i, (ql, n) in enumerate(zip(case.q_lens, case.seq_lens, strict=True)):
        kv = flat[torch.as_tensor(k.token_slots(table[i], n, 1))]
        ref = k.reference_attention(
            inp.q[start : start + ql], kv[..., :16], kv[..., 16:], inp.scale
        )
        inp.out[start : start + ql] = ref
        start += ql
    assert k.max_abs_error(case, inp, flat, table, 1) == 0.0


def test_sample_rows() -> None:
    shape = k.SHAPES[0]
    assert k.sample_rows(k.check_cases(shape)[1]) == [(0, 1), (1, 17), (2, 64)]
    assert k.sample_rows(k.decode_case(shape, 512, 128)) == [(i, 1) for i in range(4)]
    assert k.sample_rows(k.prefill_case(shape, 1, 8192, 0)) == [(0, 64)]


def test_vllm_launch_parameters() -> None:
    assert k.fa3_num_splits(1) == 32 and k.fa3_num_splits(512) == 32
    assert k.fa3_num_splits(2048) == 0  # above the CUDA-graph sizes: FA3's heuristic
    sizes = k.capture_sizes()
    assert sizes[:5] == [1, 2, 4, 8, 16] and 248 in sizes and 256 in sizes and 264 not in sizes
    assert sizes[-1] == 512
    assert [k.triton_seq_threshold_3d(h) for h in (32, 8, 4, 1)] == [4, 16, 32, 128]


def test_replicas_keep_small_cases_out_of_l2() -> None:
    assert k.replicas(1 << 20) == k.MAX_REPLICAS
    assert k.replicas(64 << 20) == 4
    assert k.replicas(40 << 30) == 1


def test_plan_covers_the_matrix_and_skips_oversized_kv() -> None:
    checks, timed, skipped = k.build_plan(k.plan_spec(k.parse_args([])))
    assert len(checks) == 2 * len(k.SHAPES)
    assert len(timed) + len(skipped) == len(k.SHAPES) * (16 + 3)
    assert all(c.kv_bytes > 40 * k.GiB for c in skipped)
    assert all(c.kv_bytes <= 40 * k.GiB for c in timed)
    assert [c.kv_bytes for c in timed] == sorted(c.kv_bytes for c in timed)
    assert {c.label for c in skipped} >= {"MHA-hd128 decode b512 ctx32768"}
    gqa4 = {c.label for c in timed if c.shape.kind == "GQA-4"}
    assert "GQA-4-hd128 decode b512 ctx32768" in gqa4  # 32 GiB of KV with 4 KV heads
    prefill = [c for c in timed if c.phase == "prefill" and c.shape == k.SHAPES[0]]
    assert sorted((c.batch, c.q_len, c.ctx) for c in prefill) == [
        (1, 8192, 0),
        (4, 512, 0),
        (4, 512, 2048),
    ]
    assert all(c.seq_lens[0] == c.ctx + c.q_len for c in prefill)
    assert k.pool_bytes(checks + timed) <= 40 * k.GiB


def test_quick_plan_is_small() -> None:
    checks, timed, skipped = k.build_plan(k.plan_spec(k.parse_args(["--quick"])))
    assert len(checks) == 4 and len(timed) == 10 and not skipped


def test_unknown_shape_is_refused() -> None:
    with pytest.raises(SystemExit):
        k.plan_spec(k.parse_args(["--shapes", "MHA-hd96"]))


def test_help_works_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        k.parse_args(["--help"])
    assert e.value.code == 0
    assert "--max-seconds" in capsys.readouterr().out


def test_variants_match_the_report() -> None:
    assert [v.key for v in k.VARIANTS] == list(kr.VARIANTS)


def test_case_line_shows_ratios_and_failures() -> None:
    case = k.decode_case(k.SHAPES[1], 32, 1024)
    rows = []
    for i, v in enumerate(k.VARIANTS):
        row = k._base_row(case, v, 1, "cpu")
        row.update(ms=0.1 * (1 + i), ok=i != 2, max_abs_err=0.004)
        rows.append(row)
    line = k.case_line(case, rows)
    assert line.startswith("GQA-8-hd128 decode b32 ctx1024")
    assert "0.1000" in line and "2.000" in line and "FAIL" in line


def test_a_failing_kernel_is_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> list[k.Call]:
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(k, "fa3_calls", fail)
    monkeypatch.setattr(k, "triton_calls", fail)
    case = k.check_cases(k.Shape("GQA-8", 8, 2, 16))[0]
    pool = k.Pool(case.kv_bytes, torch.device("cpu"), seed=0)
    opts = k.Options(10.0, 3, 10, True, 0, "cpu")
    rows = k.run_case(case, pool, opts, np.random.default_rng(0))
    assert [kr.variant_of(r) for r in rows] == list(kr.VARIANTS)
    assert all(not r["ok"] and r["ms"] is None for r in rows)
    assert all(r["error"] == "RuntimeError: no GPU here" for r in rows)
    assert "FAIL" in k.case_line(case, rows)
