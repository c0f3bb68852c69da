"""Tests for proxima_bench.planner: capacity arithmetic, live tokens, risk, CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    from proxima_bench.planner import plan as pl
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proxima-bench" / "src"))
    from proxima_bench.planner import plan as pl

GIB = 1024**3
REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------
# the brief's reference: Llama-2-7B shape, 8 GiB KV, bf16
# --------------------------------------------------------------------------


def test_llama2_7b_bytes_per_token() -> None:
    shape = pl.PRESETS["llama-2-7b"]
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (32, 32, 128)
    # 2 (K, V) x 32 layers x 32 heads x 128 x 2 bytes = 512 KiB
    assert shape.kv_bytes_per_token("bf16") == 524_288


def test_llama2_7b_8gib_reference_capacity() -> None:
    bpt = pl.PRESETS["llama-2-7b"].kv_bytes_per_token("bf16")
    stock = pl.stock_capacity(8 * GIB, bpt, 16)
    prox = pl.proxima_capacity(8 * GIB, bpt)
    assert stock.pages == 1024
    assert stock.slots == 16_384
    assert stock.usable_tokens == 16_368  # minus vLLM's null block
    assert prox.slots == 16_384
    assert prox.usable_tokens == 16_383  # minus the null slot


def test_plan_reports_reference_numbers() -> None:
    lengths = pl.lengths_from_arrays("x", [100] * 10, [50] * 10)
    p = pl.plan(pl.PRESETS["llama-2-7b"], 8 * GIB, lengths, "bf16", concurrencies=[1], trials=10)
    assert p["layouts"]["stock"]["capacity"]["usable_tokens"] == 16_368
    assert p["layouts"]["proxima"]["capacity"]["usable_tokens"] == 16_383
    text = pl.format_plan(p)
    assert "16,368" in text and "16,383" in text and "1,024" in text


def test_config_json_and_folder_give_the_preset_shape(tmp_path: Path) -> None:
    config = REPO / "vllm-proxima" / "src" / "vllm_proxima" / "bench" / "models" / "llama-2-7b"
    if not (config / "config.json").is_file():
        config = tmp_path
        (tmp_path / "config.json").write_text(
            json.dumps(
                {
                    "num_hidden_layers": 32,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 32,
                    "hidden_size": 4096,
                    "torch_dtype": "bfloat16",
                }
            )
        )
    for spec in (str(config), str(config / "config.json")):
        shape = pl.load_shape(spec)
        assert shape.kv_bytes_per_token() == 524_288


def test_tiny_model_capacity_matches_what_the_cpu_server_reports() -> None:
    # models/tiny-llama: 2 layers, 2 KV heads, head_dim 32, float32 -> 1 KiB/token.
    shape = pl.shape_from_config(
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "hidden_size": 128,
            "torch_dtype": "float32",
        }
    )
    assert shape.kv_bytes_per_token() == 1024
    # The CPU server (16 MiB KV) reports 128 blocks of 128 (stock) and
    # proxima:kv_slots_total 16383.
    assert pl.stock_capacity(16 * 1024**2, 1024, 128).usable_tokens == 127 * 128
    assert pl.proxima_capacity(16 * 1024**2, 1024).usable_tokens == 16_383


def test_gqa_and_fp8_and_unknown_dtype() -> None:
    shape = pl.PRESETS["llama-3-8b"]  # 32 layers, 8 KV heads
    assert shape.kv_bytes_per_token("auto") == 2 * 32 * 8 * 128 * 2
    assert shape.kv_bytes_per_token("fp8") == 2 * 32 * 8 * 128
    with pytest.raises(pl.PlannerError, match="unknown dtype"):
        shape.kv_bytes_per_token("int3")


def test_mla_config_is_refused() -> None:
    with pytest.raises(pl.PlannerError, match="MLA"):
        pl.shape_from_config(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "hidden_size": 8,
                "kv_lora_rank": 4,
            }
        )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8GiB", 8 * GIB),
        ("16MiB", 16 * 1024**2),
        ("16777216", 16_777_216),
        ("8GB", 8 * 10**9),
        ("1.5GiB", int(1.5 * GIB)),
        ("8e9", 8_000_000_000),
    ],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert pl.parse_bytes(text) == value


def test_parse_bytes_rejects_garbage() -> None:
    with pytest.raises(pl.PlannerError):
        pl.parse_bytes("lots")


def test_kv_bytes_from_gpu_memory() -> None:
    params = pl.PRESETS["llama-2-7b"].num_params()
    assert params is not None and 6.6e9 < params < 6.8e9  # Llama-2-7B: 6.74 B
    kv = pl.kv_bytes_from_gpu(80 * GIB, 0.9, params * 2, 2 * GIB)
    assert kv == int(80 * GIB * 0.9) - params * 2 - 2 * GIB
    with pytest.raises(pl.PlannerError, match="no KV memory"):
        pl.kv_bytes_from_gpu(16 * GIB, 0.9, params * 2, 2 * GIB)


# --------------------------------------------------------------------------
# live tokens
# --------------------------------------------------------------------------


def _brute_live(p: int, o: int, block: int) -> int:
    return sum(-(-(p + t) // block) * block for t in range(o))


@pytest.mark.parametrize("block", [1, 16, 128])
def test_lifetime_token_steps_matches_brute_force(block: int) -> None:
    rng = np.random.default_rng(1)
    prompts = rng.integers(1, 300, size=200)
    outputs = rng.integers(1, 300, size=200)
    fast = pl.lifetime_token_steps(prompts, outputs, block)
    slow = [_brute_live(int(p), int(o), block) for p, o in zip(prompts, outputs, strict=True)]
    assert np.allclose(fast, slow)


def test_block_rounding_is_about_7_5_tokens_per_request() -> None:
    rng = np.random.default_rng(0)
    lengths = pl.lengths_from_arrays(
        "baseline", rng.integers(50, 201, 20000), rng.integers(32, 257, 20000)
    )
    extra = pl.mean_live_tokens(lengths, 16) - pl.mean_live_tokens(lengths, 1)
    assert extra == pytest.approx(7.5, abs=0.1)


def test_mean_live_tokens_is_time_weighted() -> None:
    # A: P=10, O=1 (one step holding 10); B: P=0+1, O=3 (holds 1, 2, 3).
    lengths = pl.lengths_from_arrays("two", [10, 1], [1, 3])
    assert pl.mean_live_tokens(lengths, 1) == pytest.approx((10 + 1 + 2 + 3) / 4)


# --------------------------------------------------------------------------
# risk
# --------------------------------------------------------------------------


def test_burst_risk_certain_and_impossible() -> None:
    lengths = pl.lengths_from_arrays("fixed", [100] * 4, [101] * 4)
    rng = np.random.default_rng(0)
    # 4 requests peak at 4 x 200 = 800 tokens.
    assert pl.burst_risk(lengths, 4, 800, 1, 50, rng)["risk"] == 0.0
    assert pl.burst_risk(lengths, 4, 799, 1, 50, rng)["risk"] == 1.0
    # Block rounding: 200 tokens -> 13 blocks of 16 = 208 each.
    assert pl.burst_risk(lengths, 4, 832, 16, 50, rng)["risk"] == 0.0
    assert pl.burst_risk(lengths, 4, 831, 16, 50, rng)["risk"] == 1.0


def test_burst_peak_counts_finished_requests_as_freed() -> None:
    # One long request (P=10, O=1000) and one short (P=500, O=2): the short
    # one finishes at t=1, so the peak is max(510 + 11, 10 + 999) = 1009,
    # not 10 + 999 + 501 = 1510.
    lengths = pl.lengths_from_arrays("pair", [10, 500], [1000, 2])

    class FixedOrder:
        def integers(self, lo: int, hi: int, size: tuple[int, ...]) -> np.ndarray:
            return np.tile(np.array([0, 1]), (size[0], 1))

    r = pl.burst_risk(lengths, 2, 1009, 1, 3, FixedOrder())  # type: ignore[arg-type]
    assert r["risk"] == 0.0
    assert r["mean_peak_usage"] == pytest.approx(1.0)
    assert pl.burst_risk(lengths, 2, 1008, 1, 3, FixedOrder())["risk"] == 1.0  # type: ignore[arg-type]


def test_burst_admission_stops_when_prompts_do_not_fit() -> None:
    lengths = pl.lengths_from_arrays("big", [300] * 3, [10] * 3)
    r = pl.burst_risk(lengths, 3, 700, 1, 20, np.random.default_rng(0))
    assert r["mean_admitted"] == 2.0  # the third prompt does not fit


def test_steady_risk_monotone_in_concurrency_and_seeded() -> None:
    rng = np.random.default_rng(3)
    lengths = pl.lengths_from_arrays("u", rng.integers(50, 201, 5000), rng.integers(32, 257, 5000))
    risks = [
        pl.steady_risk(lengths, c, 16_383, 1, 400, np.random.default_rng(c))["risk"]
        for c in (32, 64, 80, 128)
    ]
    assert risks[0] == 0.0 and risks[-1] == 1.0
    assert risks == sorted(risks)
    a = pl.steady_risk(lengths, 76, 16_383, 1, 400, np.random.default_rng(9))
    b = pl.steady_risk(lengths, 76, 16_383, 1, 400, np.random.default_rng(9))
    assert a == b


def test_proxima_never_riskier_than_stock_on_same_draws() -> None:
    rng = np.random.default_rng(5)
    lengths = pl.lengths_from_arrays("u", rng.integers(50, 201, 5000), rng.integers(32, 257, 5000))
    p = pl.plan(
        pl.PRESETS["llama-2-7b"],
        8 * GIB,
        lengths,
        "bf16",
        concurrencies=[64, 76, 80],
        trials=300,
    )
    for s, x in zip(p["layouts"]["stock"]["risk"], p["layouts"]["proxima"]["risk"], strict=True):
        assert x["steady_risk"] <= s["steady_risk"]
        assert x["burst_risk"] <= s["burst_risk"]
    assert p["resident_gain"] > 0.03  # 7.5 tokens on ~218 live tokens


# --------------------------------------------------------------------------
# CLI and --check
# --------------------------------------------------------------------------


def test_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "llama-2-7b", "--kv-bytes", "8GiB", "--kv-dtype", "bf16"]
    argv += [
        "--prompt-uniform",
        "50,200",
        "--output-uniform",
        "32,256",
        "--concurrency",
        "8,128",
        "--trials",
        "50",
    ]
    assert pl.main(argv) == 0
    out = capsys.readouterr().out
    assert "16,368" in out and "16,383" in out
    assert pl.main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layouts"]["stock"]["capacity"]["pages"] == 1024
    assert [r["concurrency"] for r in data["layouts"]["stock"]["risk"]] == [8, 128]
    assert data["layouts"]["stock"]["risk"][1]["steady_risk"] == 1.0  # 128 x ~218 > 16k


def test_cli_lognormal_and_workload_sources(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "--model",
        "llama-2-7b",
        "--kv-bytes",
        "8GiB",
        "--concurrency",
        "4",
        "--trials",
        "20",
        "--json",
    ]
    assert (
        pl.main(
            [
                *base,
                "--prompt-lognormal",
                "4.58,1.0,4,2048",
                "--output-lognormal",
                "5.5,0.8,4,1024",
            ]
        )
        == 0
    )
    lognormal = json.loads(capsys.readouterr().out)
    assert 120 < lognormal["lengths"]["prompt_mean"] < 200
    assert pl.main([*base, "--workload", "sharegpt"]) == 0
    sharegpt = json.loads(capsys.readouterr().out)
    assert 120 < sharegpt["lengths"]["prompt_mean"] < 200


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert pl.main(["--model", "llama-2-7b", "--kv-bytes", "8GiB"]) == 2
    assert "exactly one length source" in capsys.readouterr().err
    assert pl.main(["--model", "nope", "--kv-bytes", "8GiB", "--workload", "baseline"]) == 2
    assert "not a preset" in capsys.readouterr().err
    assert pl.main(["--model", "llama-2-7b", "--workload", "baseline"]) == 2
    assert "--kv-bytes or --gpu-memory" in capsys.readouterr().err


def _fake_raw(model_dir: Path) -> dict[str, object]:
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "hidden_size": 128,
                "torch_dtype": "float32",
            }
        )
    )

    def run(label: str, c: int, series: dict[str, list[float]]) -> dict[str, object]:
        return {
            "point": {"label": label, "max_concurrency": c, "request_rate": None},
            "error": None,
            "metrics_series": {"t": [0, 0.5, 1.0], "values": series},
            "summary": {
                "peak_kv_usage": 0.05,
                "mean_running": 3.5,
                "peak_running": 4,
                "preemptions": 0.0,
            },
        }

    busy = {
        "vllm:num_requests_running": [0, 4, 4],
        "vllm:kv_cache_usage_perc": [0, 0.02, 0.04],
    }
    return {
        "config": {
            "model": str(model_dir),
            "server_args": [
                "--dtype",
                "float32",
                "--kv-cache-memory-bytes",
                "16777216",
            ],
            "modes": [
                {"label": "off", "proxima": "off", "args": []},
                {"label": "on", "proxima": "on", "args": []},
            ],
        },
        "workload": {"lengths": {"prompt": [60, 70, 80], "output": [40, 50, 60]}},
        "modes": {
            "off": {
                "proxima": "off",
                "server": {"cache_config": [{"block_size": "128", "num_gpu_blocks": "128"}]},
                "runs": [run("c=4", 4, busy)],
            },
            "on": {
                "proxima": "on",
                "server": {"cache_config": [{"block_size": "1", "num_gpu_blocks": "16384"}]},
                "runs": [
                    run(
                        "c=4",
                        4,
                        {**busy, "proxima:kv_slots_total": [16383, 16383, 16383]},
                    )
                ],
            },
        },
    }


def test_check_against_a_raw_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _fake_raw(tmp_path)
    result = pl.check(raw, trials=50)
    off, on = result["modes"]["off"], result["modes"]["on"]
    assert off["block_size"] == 128 and off["predicted_usable_tokens"] == 127 * 128
    assert off["capacity_match"] is True
    assert on["predicted_usable_tokens"] == 16_383 and on["capacity_match"] is True
    point = on["points"][0]
    assert point["measured_mean_busy_usage"] == pytest.approx(0.03)
    assert point["predicted_resident"] == 4
    # 4 requests x mean live tokens / pool
    assert point["predicted_mean_usage"] == pytest.approx(4 * on["mean_live_tokens"] / 16_383)
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(raw))
    assert pl.main(["--check", str(raw_path), "--trials", "20"]) == 0
    out = capsys.readouterr().out
    assert "predicted 16,256, measured 16,256: OK" in out
    assert "predicted 16,383, measured 16,383: OK" in out


def test_check_flags_a_capacity_mismatch(tmp_path: Path) -> None:
    raw = _fake_raw(tmp_path)
    raw["modes"]["on"]["runs"][0]["metrics_series"]["values"]["proxima:kv_slots_total"] = [16384.0]  # type: ignore[index]
    assert pl.check(raw, trials=10)["modes"]["on"]["capacity_match"] is False


def test_server_default_max_num_seqs_follows_vllms_hardware_rule() -> None:
    def raw(gpus: list[dict[str, str]]) -> dict[str, object]:
        return {"machine": {"gpus": gpus}}

    assert pl.server_default_max_num_seqs(raw([])) == 128  # CPU
    h200 = {"name": "NVIDIA H200", "memory_total": "143771 MiB"}
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "81920 MiB"}
    l4 = {"name": "NVIDIA L4", "memory_total": "23034 MiB"}
    assert pl.server_default_max_num_seqs(raw([h200])) == 1024
    assert pl.server_default_max_num_seqs(raw([a100])) == 256
    assert pl.server_default_max_num_seqs(raw([l4])) == 256


def test_check_takes_the_model_from_the_command_line_when_the_runs_folder_is_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _fake_raw(tmp_path)
    model_dir = Path(raw["config"]["model"])  # type: ignore[index]
    raw["config"]["model"] = "/elsewhere/llama-shape"  # type: ignore[index]
    with pytest.raises(pl.PlannerError, match="pass --model"):
        pl.check(raw, trials=10)
    result = pl.check(raw, trials=10, model=str(model_dir))
    assert result["modes"]["on"]["capacity_match"] is True
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(raw))
    assert pl.main(["--check", str(raw_path), "--trials", "10"]) == 2
    assert "pass --model" in capsys.readouterr().err
    assert pl.main(["--check", str(raw_path), "--model", str(model_dir), "--trials", "10"]) == 0
    assert "predicted 16,383, measured 16,383: OK" in capsys.readouterr().out
