"""Unit tests for the serving A/B's parts: metrics scraping, server process
handling, vLLM bench arguments, configuration and the report (no vLLM server;
fake servers on loopback stand in)."""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import proxima_bench  # noqa: F401
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proxima-bench" / "src"))

from proxima_bench.serving import ab
from proxima_bench.serving import metrics_scrape as ms
from proxima_bench.serving import report as rp
from proxima_bench.serving.server import Server, ServerError, group_alive, kill_group, tail
from proxima_bench.serving.vllm_bench import bench_argv

METRICS_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1024",prefix="a,b \\"q\\""} 1.0
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 4.0
proxima:kv_slots_total{engine="0",model_name="m"} 16383.0
other_metric 5
bad line here
"""


# --------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------


def test_parse_and_select() -> None:
    samples = ms.parse_prometheus(METRICS_TEXT)
    values = ms.select(samples)
    assert values["vllm:num_requests_running"] == 5.0  # summed over engines
    assert values["vllm:kv_cache_usage_perc"] == 0.5  # a fraction: averaged
    assert values["vllm:num_preemptions_total"] == 7.0
    assert values["proxima:kv_slots_total"] == 16383.0
    assert "vllm:num_preemptions_created" not in values
    assert "other_metric" not in values
    info = ms.info_labels(samples, "vllm:cache_config_info")
    assert info == [
        {
            "block_size": "16",
            "engine": "0",
            "num_gpu_blocks": "1024",
            "prefix": 'a,b "q"',
        }
    ]


def test_time_series_pads_late_and_missing_metrics() -> None:
    ts = ms.TimeSeries()
    ts.add(0.0, {"a": 1.0})
    ts.add(0.5, {"a": 2.0, "b": 10.0})
    ts.add(1.0, {"b": float("nan")})
    assert ts.t == [0.0, 0.5, 1.0]
    assert ts.values == {"a": [1.0, 2.0, None], "b": [None, 10.0, None]}


def test_summarize_peaks_and_counter_increases() -> None:
    ts = ms.TimeSeries()
    names = (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    )
    table = [(0, 0.0, 5, 100, 10), (4, 0.6, 7, 300, 60), (2, 0.3, 8, 500, 110)]
    rows = [dict(zip(names, values, strict=True)) for values in table]
    for i, row in enumerate(rows):
        ts.add(i * 0.5, {k: float(v) for k, v in row.items()})
    s = ms.summarize(ts)
    assert s["peak_kv_usage"] == 0.6
    assert s["preemptions"] == 3.0
    assert s["peak_running"] == 4.0 and s["mean_running"] == 3.0  # idle samples skipped
    assert s["prefix_cache_hit_rate"] == pytest.approx(100 / 400)
    assert s["peak_gpu_memory_mib"] is None and s["proxima_preemptions"] is None


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    counter = 0

    def do_GET(self) -> None:
        if self.path == "/health":
            body = b""
        elif self.path == "/metrics":
            type(self).counter += 1
            body = (
                f'vllm:num_requests_running{{engine="0"}} {self.counter}\n'
                f'vllm:num_preemptions_total{{engine="0"}} {self.counter * 2}\n'
            ).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_scraper_thread_collects_a_time_series(metrics_server: str) -> None:
    ticks: list[float] = []
    scraper = ms.MetricsScraper(metrics_server, interval=0.05, on_tick=lambda t, v: ticks.append(t))
    scraper.scrape_once()
    scraper.start()
    time.sleep(0.6)
    series = scraper.stop()
    assert not scraper.is_alive()
    running = series.values["vllm:num_requests_running"]
    assert len(series.t) >= 6 and len(running) == len(series.t)
    assert running == sorted(running)  # the fake counts scrapes
    assert series.t == sorted(series.t)
    assert len(ticks) == len(series.t)
    assert ms.summarize(series)["preemptions"] == running[-1] * 2 - running[0] * 2


def test_scraper_counts_errors_when_the_server_is_gone() -> None:
    scraper = ms.MetricsScraper("http://127.0.0.1:9", interval=0.05)
    scraper.scrape_once()
    assert scraper.series.errors == 1 and scraper.series.t == []
    assert scraper.series.last_error


def test_gpu_poller_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    poller = ms.GpuMemoryPoller()
    assert not poller.available() and poller.used_mib() is None


# --------------------------------------------------------------------------
# server process handling (fake "python" executables)
# --------------------------------------------------------------------------


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def _group_alive(pgid: int) -> bool:
    return group_alive(pgid)


def test_server_that_dies_reports_its_last_40_log_lines(tmp_path: Path) -> None:
    fake = _fake_python(
        tmp_path,
        """
        import sys
        for i in range(1, 101):
            print(f"log line {i}")
        sys.exit(3)
    """,
    )
    server = Server("m", [], tmp_path / "server.log", python=fake)
    server.start()
    with pytest.raises(ServerError) as err:
        server.wait_healthy(timeout=30)
    server.stop()
    message = str(err.value)
    assert "exited with status 3" in message
    assert "log line 100" in message and "log line 61" in message
    assert "log line 60\n" not in message


def test_server_timeout_is_reported_and_the_group_killed(tmp_path: Path) -> None:
    fake = _fake_python(
        tmp_path,
        """
        import subprocess, time
        print("loading forever", flush=True)
        subprocess.Popen(["sleep", "300"])  # a child in the same group
        time.sleep(300)
    """,
    )
    server = Server("m", [], tmp_path / "server.log", python=fake)
    server.start()
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(ServerError, match="did not answer /health within 1 s"):
        server.wait_healthy(timeout=1)
    time.sleep(0.3)
    assert _group_alive(pgid)
    server.stop(timeout=2)
    assert not _group_alive(pgid)  # the sleeping child too


@pytest.mark.parametrize("parent_sigint", ["default", "ignored"])
def test_server_healthy_log_facts_and_sigint_stop(tmp_path: Path, parent_sigint: str) -> None:
    """``ignored``: the harness itself started in the background by a non-interactive shell
    (SIGINT ignored, which ``exec`` keeps): the server still gets SIGINT's default action and
    shuts down cleanly on the stop's SIGINT, not by SIGTERM."""
    fake = _fake_python(
        tmp_path,
        """
        import http.server, sys
        port = int(sys.argv[sys.argv.index("--port") + 1])
        print("proxima-vllm 0.1.0 on vLLM 0.26.0: proxima on (admission=adaptive)")
        print("GPU KV cache size: 16,384 tokens", flush=True)
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
            def log_message(self, *a): pass
        try:
            http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
        except KeyboardInterrupt:
            print("clean shutdown", flush=True)
    """,
    )
    server = Server("m", ["--proxima", "on"], tmp_path / "server.log", python=fake)
    assert server.command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert server.command[-2:] == ["--proxima", "on"]
    inherited = signal.getsignal(signal.SIGINT)
    if parent_sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server.start()
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert server.wait_healthy(timeout=30) >= 0
    assert server.alive()
    assert server.log_facts() == {
        "proxima_version": "0.1.0",
        "vllm_version": "0.26.0",
        "mode": "on",
        "admission": "adaptive",
        "kv_cache_size_tokens": 16384,
    }
    code = server.stop()
    assert code == 0 and not server.alive()
    assert "clean shutdown" in tail(server.log_path)
    assert server.env["HF_HUB_OFFLINE"] == "1"


def test_kill_group_escalates_past_ignored_signals(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        ["sh", "-c", "trap '' INT TERM; sleep 300 & wait"], start_new_session=True
    )
    time.sleep(0.3)
    t0 = time.monotonic()
    kill_group(proc, signal.SIGINT, timeout=0.5, kill_timeout=1)
    assert time.monotonic() - t0 < 10
    assert proc.returncode is not None and not _group_alive(proc.pid)


# --------------------------------------------------------------------------
# vllm bench arguments and serve_ab configuration
# --------------------------------------------------------------------------


def _bench_args(tmp_path: Path, **kw: Any) -> list[str]:
    return bench_argv(
        host="127.0.0.1",
        port=8123,
        model="/m",
        tokenizer="/m",
        dataset_path=tmp_path / "w.jsonl",
        num_prompts=16,
        result_dir=tmp_path,
        result_filename="r.json",
        label="x",
        **kw,
    )


def test_bench_argv_uses_the_custom_dataset_as_written(tmp_path: Path) -> None:
    argv = _bench_args(tmp_path, max_concurrency=4, extra=["--num-warmups", "2"])
    joined = " ".join(argv)
    for flag in (
        "--dataset-name custom",
        "--custom-output-len -1",  # per-line output_tokens (default would be 256)
        "--skip-chat-template",
        "--disable-shuffle",
        "--ignore-eos",
        "--max-concurrency 4",
        "--save-result",
        "--save-detailed",
        "--percentile-metrics ttft,tpot,itl,e2el",
        "--metric-percentiles 50,95,99",
    ):
        assert flag in joined
    assert "--request-rate" not in argv
    assert argv[-2:] == ["--num-warmups", "2"]
    assert "--request-rate 2.5" in " ".join(_bench_args(tmp_path, request_rate=2.5))


def test_bench_argv_parses_with_vllms_own_parser(tmp_path: Path) -> None:
    serve = pytest.importorskip("vllm.benchmarks.serve")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(_bench_args(tmp_path, max_concurrency=4))
    assert args.dataset_name == "custom" and args.custom_output_len == -1
    assert args.max_concurrency == 4 and args.ignore_eos and args.skip_chat_template
    assert args.disable_shuffle and args.save_detailed


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    return folder


def test_resolve_defaults_and_preset(model_dir: Path, tmp_path: Path) -> None:
    cfg = ab.resolve(["--model", str(model_dir), "--out", str(tmp_path / "o")])
    assert [m.label for m in cfg.modes] == ["off", "on"]
    assert [p.label for p in cfg.points] == ["c=4", "c=8", "c=16", "c=32", "c=64"]
    assert cfg.max_total_len == 4096 and cfg.num_prompts == 200 and cfg.fresh_prompts
    smoke = ab.resolve(["--preset", "cpu-smoke", "--model", str(model_dir), "--num-prompts", "8"])
    assert [p.label for p in smoke.points] == ["c=1", "c=4"]
    assert smoke.num_prompts == 8  # the flag beats the preset
    assert "--kv-cache-memory-bytes" in smoke.server_args
    assert smoke.max_total_len == 1024  # from --max-model-len
    assert smoke.env == {"TORCH_COMPILE_DISABLE": "1"}


def test_resolve_modes_points_and_args(model_dir: Path) -> None:
    cfg = ab.resolve(
        [
            "--model", str(model_dir),
            "--modes", "off,on,on:cons",
            "--mode-args", "on:cons=--proxima-admission conservative",
            "--mode-args", "off=--block-size 16",
            "--server-args", "--enforce-eager --max-model-len=2048",
            "--concurrency", "2,4",
            "--request-rates", "1,3.5",
        ]
    )  # fmt: skip
    assert [(m.label, m.proxima, m.args) for m in cfg.modes] == [
        ("off", "off", ("--block-size", "16")),
        ("on", "on", ()),
        ("on:cons", "on", ("--proxima-admission", "conservative")),
    ]
    assert [p.label for p in cfg.points] == [
        "c=2,r=1",
        "c=2,r=3.5",
        "c=4,r=1",
        "c=4,r=3.5",
    ]
    assert cfg.max_total_len == 2048
    rates = ab.resolve(["--model", str(model_dir), "--request-rates", "2"])
    assert [(p.max_concurrency, p.request_rate) for p in rates.points] == [(None, 2.0)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--modes", "off,maybe"], "must be 'on', 'off'"),
        (["--modes", "on,on"], "distinct"),
        (["--mode-args", "x=--foo"], "not in --modes"),
        (["--server-args", "--port 9"], "--port is set by serve_ab"),
        (["--mode-args", "on=--proxima off"], "--proxima is set by serve_ab"),
        (["--concurrency", "0"], ">= 1"),
        (["--concurrency", "a,b"], "bad list"),
        (["--env", "NOEQUALS"], "KEY=VALUE"),
    ],
)
def test_resolve_rejects_bad_settings(model_dir: Path, argv: list[str], message: str) -> None:
    with pytest.raises(ab.ABError, match=message):
        ab.resolve(["--model", str(model_dir), *argv])


def test_resolve_requires_a_local_model(tmp_path: Path) -> None:
    with pytest.raises(ab.ABError, match="local folders only"):
        ab.resolve(["--model", "meta-llama/Llama-2-7b-hf"])
    assert ab.main(["--model", str(tmp_path / "none")]) == 2


def test_condense_result_drops_texts_and_keeps_latencies() -> None:
    result = {
        "completed": 2, "failed": 1, "output_throughput": 10.0, "p95_e2el_ms": 900.0,
        "input_lens": [5, 6, 7], "output_lens": [3, 2, 0], "ttfts": [0.1, 0.2, 0.0],
        "itls": [[0.01, 0.02], [0.05], []], "start_times": [0, 1, 2],
        "generated_texts": ["abc", "de", ""], "errors": ["", "", "boom"],
    }  # fmt: skip
    metrics, per_request = ab.condense_result(result)
    assert metrics["completed"] == 2 and metrics["p95_e2el_ms"] == 900.0
    assert "generated_texts" not in per_request and "itls" not in per_request
    assert per_request["e2els"][:2] == pytest.approx([0.13, 0.25])
    assert per_request["errors"] == {"2": "boom"}


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def _run(label: str, c: int, tput: float, p95_s: float, failed: int = 0) -> dict[str, Any]:
    return {
        "point": {"label": label, "max_concurrency": c, "request_rate": None},
        "error": None,
        "metrics": {
            "completed": 10 - failed,
            "failed": failed,
            "request_throughput": tput / 100,
            "output_throughput": tput,
            "p50_e2el_ms": p95_s * 500,
            "p95_e2el_ms": p95_s * 1000,
            "p99_e2el_ms": p95_s * 1100,
            "p95_ttft_ms": 50.0,
            "p95_tpot_ms": 5.0,
        },
        "summary": {"peak_kv_usage": c / 100, "preemptions": 0.0, "peak_running": c},
        "metrics_series": {
            "t": [0, 0.5, 1.0],
            "values": {"vllm:kv_cache_usage_perc": [0.0, c / 100, None]},
        },
        "checks": {"client_prompt_len_mismatches": 0},
    }


def _raw() -> dict[str, Any]:
    points = [{"label": f"c={c}", "max_concurrency": c, "request_rate": None} for c in (4, 8, 16)]
    return {
        "status": "done",
        "config": {"points": points, "modes": [], "server_args": []},
        "modes": {
            "off": {
                "runs": [
                    _run("c=4", 4, 100, 1.0),
                    _run("c=8", 8, 150, 2.5),
                    _run("c=16", 16, 160, 4.0),
                ]
            },
            "on": {
                "runs": [
                    _run("c=4", 4, 100, 0.9),
                    _run("c=8", 8, 180, 1.8),
                    _run("c=16", 16, 200, 1.9, failed=1),
                ]
            },
        },
    }


def test_knee_is_the_highest_load_within_target_without_failures() -> None:
    raw = _raw()
    off, on = rp.knee(raw, "off", 2.0), rp.knee(raw, "on", 2.0)
    assert off is not None and off["label"] == "c=4"
    assert on is not None and on["label"] == "c=8"  # c=16 had a failed request
    assert rp.knee(raw, "off", 0.5) is None
    assert rp.knee(raw, "off", 3.0)["label"] == "c=8"  # type: ignore[index]


def test_render_has_both_modes_per_point_and_the_knee() -> None:
    text = rp.render(_raw(), 2.0, None)
    for label in ("### c=4", "### c=8", "### c=16"):
        assert label in text
    for mode in ("off", "on"):  # one row per point: | mode | done | failed | ...
        assert len(re.findall(rf"^\| {mode} \| \d+ \| \d+ \|", text, re.MULTILINE)) == 3
    assert "- **off**: c=4" in text and "- **on**: c=8" in text
    assert "a higher load than off" in text
    assert "+20.0%" in text  # c=8: 180 vs 150 out tok/s


def test_write_report_with_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = rp.write_report(_raw(), tmp_path, 2.0)
    assert path.read_text().count("![") == 3
    for name in rp.PLOTS.values():
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_report_cli_rerenders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(_raw()))
    assert rp.main([str(raw_path), "--no-plots", "--p95-target", "3"]) == 0
    assert "- **off**: c=8" in (tmp_path / "report.md").read_text()
    assert rp.main([str(tmp_path / "missing.json")]) == 2


def test_jsonl_shim_feeds_vllms_custom_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip("vllm.benchmarks.datasets.datasets")
    from proxima_bench.serving import vllm_bench

    path = tmp_path / "w.jsonl"
    rows = [
        {
            "prompt": "a b c",
            "output_tokens": 7,
            "prompt_len": 4,
            "group": None,
            "prefix_len": 0,
        }
    ]
    rows.append(
        {
            "prompt": "d e",
            "output_tokens": 3,
            "prompt_len": 3,
            "group": 1,
            "prefix_len": 2,
        }
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(datasets, "pd", vllm_bench._PandasJsonlShim())
    dataset = datasets.CustomDataset(dataset_path=str(path), disable_shuffle=True)
    assert dataset.data == rows

    class Tok:
        def __call__(self, text: str) -> Any:
            return type("Enc", (), {"input_ids": [1, *range(len(text.split()))]})()

    samples = dataset.sample(
        tokenizer=Tok(), num_requests=2, output_len=-1, skip_chat_template=True
    )
    assert [(s.prompt, s.prompt_len, s.expected_output_len) for s in samples] == [
        ("a b c", 4, 7),
        ("d e", 3, 3),
    ]


def test_shape_model_has_the_presets_kv_shape_and_the_tokenizer(tmp_path: Path) -> None:
    from proxima_bench.planner import plan as planner
    from proxima_bench.planner import shape_model

    tok = tmp_path / "tok"
    tok.mkdir()
    vocab = {f"t{i}": i for i in range(300)}
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    (tok / "tokenizer_config.json").write_text("{}")
    out = shape_model.make_shape_model("llama-2-7b", tok, tmp_path / "shape")
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 300 and config["num_hidden_layers"] == 32
    assert (out / "tokenizer.json").read_text() == (tok / "tokenizer.json").read_text()
    assert planner.load_shape(str(out)).kv_bytes_per_token() == 524_288  # bf16 Llama-2-7B
    with pytest.raises(shape_model.ShapeModelError, match="no tokenizer"):
        shape_model.make_shape_model("llama-2-7b", tmp_path, tmp_path / "x")


def test_shape_model_writes_sliding_window_layouts(tmp_path: Path) -> None:
    from proxima_bench.planner import shape_model

    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    out = shape_model.make_shape_model(
        "llama-3-8b", tok, tmp_path / "sw", sliding_window=128, layers="alternating"
    )
    config = json.loads((out / "config.json").read_text())
    kinds = config["layer_types"]
    assert config["sliding_window"] == 128 and len(kinds) == config["num_hidden_layers"] == 32
    assert kinds[:4] == ["sliding_attention", "full_attention"] * 2
    assert kinds.count("full_attention") == 16
    gemma3 = shape_model.layer_types("5:1", 12)
    assert gemma3.count("full_attention") == 2 and gemma3[5] == gemma3[11] == "full_attention"
    assert set(shape_model.layer_types("all-sliding", 3)) == {"sliding_attention"}
    full = shape_model.make_shape_model("llama-3-8b", tok, tmp_path / "f")
    plain = json.loads((full / "config.json").read_text())
    assert "layer_types" not in plain and "sliding_window" not in plain
    with pytest.raises(shape_model.ShapeModelError, match="layer pattern"):
        shape_model.layer_types("3:1", 8)
    with pytest.raises(shape_model.ShapeModelError, match="window"):
        shape_model.make_shape_model("llama-3-8b", tok, tmp_path / "x", sliding_window=0)


def test_fatal_error_finds_the_engines_exception(tmp_path: Path) -> None:
    from proxima_bench.serving.server import fatal_error

    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=1) WARNING [utils.py:9] errors like `OSError: [Errno 24]`. Consider\n"
        "(EngineCore pid=2) ERROR [core.py:1332] EngineCore encountered a fatal error.\n"
        "(EngineCore pid=2) ERROR [core.py:1332] Traceback (most recent call last):\n"
        "(EngineCore pid=2) ERROR [core.py:1332] ValueError: double free of slot(s) [5, 6]\n"
        "(APIServer pid=1) ERROR [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: x\n"
    )
    assert fatal_error(log) == "ValueError: double free of slot(s) [5, 6]"
    log.write_text("(APIServer pid=1) INFO all good\n")
    assert fatal_error(log) is None
    assert fatal_error(tmp_path / "missing.log") is None


def test_duplicate_points_are_refused(model_dir: Path) -> None:
    with pytest.raises(ab.ABError, match="twice"):
        ab.resolve(["--model", str(model_dir), "--concurrency", "4,8,4"])


def test_workload_file_is_used_for_every_point(model_dir: Path, tmp_path: Path) -> None:
    wfile = tmp_path / "mine.jsonl"
    rows = [{"prompt": "x", "output_tokens": 5 + i, "prompt_len": 10 + i} for i in range(4)]
    wfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = ab.resolve(
        ["--model", str(model_dir), "--workload-file", str(wfile), "--concurrency", "1,2"]
        + ["--num-prompts", "3", "--out", str(tmp_path / "o")]
    )
    files, record = ab.prepare_workloads(cfg, ab.Progress())
    assert files == [wfile, wfile]
    assert record["lengths"] == {"prompt": [10, 11, 12], "output": [5, 6, 7]}
    with pytest.raises(ab.ABError, match="does not exist"):
        ab.resolve(["--model", str(model_dir), "--workload-file", str(tmp_path / "no.jsonl")])
