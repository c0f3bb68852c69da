"""Unit tests for the serving matrix's parts: arguments, points, budget, parity
comparison, per-class latencies, the parity client (against a fake server) and
the report (no vLLM server)."""

from __future__ import annotations

import http.server
import itertools
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

try:
    import proxima_bench  # noqa: F401
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proxima-bench" / "src"))

from proxima_bench.serving import matrix as mx
from proxima_bench.serving import matrix_report as mr

REPO = Path(__file__).resolve().parents[3]
MODEL = REPO / "models" / "tiny-llama"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"vocab_size": 1024, "max_position_embeddings": 4096}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# --------------------------------------------------------------------------
# arguments and points
# --------------------------------------------------------------------------


def test_points_are_the_briefs(model: Path) -> None:
    by_name = {p.name: p for p in mx.POINTS}
    assert [by_name[f"mix-c{c}"].num_requests for c in (1, 8, 32, 64, 128, 256)] == [
        16,
        32,
        128,
        256,
        512,
        600,
    ]
    burst = by_name["mix-burst"]
    assert (burst.num_requests, burst.max_concurrency, burst.workload) == (1000, None, "baseline")
    assert (by_name["longprompt-c32"].workload, by_name["longprompt-c32"].num_requests) == (
        "long-prompt",
        160,
    )
    assert by_name["poisson"].poisson and by_name["poisson"].num_requests == 400
    assert by_name["chat-c64"].num_requests == 400 and by_name["parity"].parity
    assert mx.scaled_count(1000, 0.05) == 50 and mx.scaled_count(16, 0.05) == 8
    assert mx.scaled_count(4, 0.05) == 4
    cfg = mx.resolve(["--model", str(model), "--points", "parity,mix-burst"])
    assert [p.name for p in cfg.points] == ["parity", "mix-burst"]  # run order kept
    assert cfg.max_total_len == 4096 and cfg.vocab_size == 1024
    assert len(mx.resolve(["--model", str(model)]).points) == len(mx.POINTS)


def test_server_args_per_mode(model: Path) -> None:
    cfg = mx.resolve(
        [
            "--model",
            str(model),
            "--server-args",
            "--dtype bfloat16 --max-model-len 2048",
            "--mode-args",
            "proxima=--proxima-admission conservative",
        ]
    )
    assert cfg.server_argv("stock") == [
        "--proxima",
        "off",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "2048",
    ]
    assert cfg.server_argv("proxima") == [
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "2048",
        "--proxima-admission",
        "conservative",
    ]
    assert cfg.max_total_len == 2048


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--points", "mix-c3"], "unknown point"),
        (["--points", "parity,parity"], "each point once"),
        (["--server-args", "--proxima on"], "--proxima is set by the matrix"),
        (["--server-args=--port=8000"], "--port is set by the matrix"),
        (["--mode-args", "on=--foo"], "stock=ARGS or proxima=ARGS"),
        (["--repeats", "0"], "--repeats"),
        (["--scale", "0"], "--scale"),
        (["--budget-s", "-1"], "--budget-s"),
        (["--poisson-rate", "0"], "--poisson-rate"),
        (["--env", "NOEQUALS"], "KEY=VALUE"),
    ],
)
def test_bad_arguments(model: Path, extra: list[str], message: str) -> None:
    with pytest.raises(mx.MatrixError, match=message):
        mx.resolve(["--model", str(model), *extra])


def test_model_is_required_and_local(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(mx.MatrixError, match="--model is required"):
        mx.resolve([])
    with pytest.raises(mx.MatrixError, match="no config.json"):
        mx.resolve(["--model", str(tmp_path)])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(mx.MatrixError, match="parity needs vocab_size"):
        mx.resolve(["--model", str(tmp_path), "--points", "parity"])
    assert mx.main(["--model", str(tmp_path / "nope")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert mx.main(["--list-points"]) == 0
    assert "mixed-c64" in capsys.readouterr().out


def test_parity_lengths_scale_and_fit(model: Path) -> None:
    cfg = mx.resolve(["--model", str(model)])
    assert mx.parity_lengths(cfg) == ((32, 256), 128)
    cfg = mx.resolve(["--model", str(model), "--scale", "0.1"])
    assert mx.parity_lengths(cfg) == ((3, 26), 13)
    cfg = mx.resolve(["--model", str(model), "--max-total-len", "200"])
    (lo, hi), out = mx.parity_lengths(cfg)
    assert hi + out <= 200 and lo <= hi and out == 100


def test_prepare_parity_is_seeded_and_in_vocab(model: Path, tmp_path: Path) -> None:
    cfg = mx.resolve(["--model", str(model), "--scale", "0.1", "--out", str(tmp_path / "o")])
    spec = {p.name: p for p in mx.POINTS}["parity"]
    a = mx.prepare_parity(cfg, spec, 0)
    b = mx.prepare_parity(cfg, spec, 0)
    c = mx.prepare_parity(cfg, spec, 1)
    assert a.prompts == b.prompts and a.prompts != c.prompts  # fresh per repeat
    assert a.prompts is not None and len(a.prompts) == 26
    assert all(7 <= t < 1024 for p in a.prompts for t in p)
    assert all(3 <= len(p) <= 26 for p in a.prompts) and set(a.output_lens) == {13}
    assert json.loads(a.path.read_text())["prompts"] == a.prompts


def test_content_seeds_differ_per_point_and_repeat() -> None:
    seeds = {mx.content_seed(0, r, p) for r in range(3) for p in mx.POINTS}
    assert len(seeds) == 3 * len(mx.POINTS)


# --------------------------------------------------------------------------
# budget, poisson rate, ratio
# --------------------------------------------------------------------------


def test_budget_estimates() -> None:
    budget = mx.Budget(100.0, 60.0)
    assert budget.point_estimate("mix-c8") == 60.0
    assert budget.why_not(60.0) is None
    assert budget.why_not(500.0) is not None and "budget" in str(budget.why_not(500.0))
    budget.walls["mix-c8", "stock"] = 20.0
    assert budget.point_estimate("mix-c8") == 40.0  # the other mode assumed alike
    assert budget.mode_estimate("mix-c8", "proxima", "stock") == 20.0
    budget.walls["mix-c8", "proxima"] = 30.0
    assert budget.point_estimate("mix-c8") == 50.0
    assert mx.Budget(None, 60.0).why_not(1e9) is None
    budget.t0 -= 95.0
    assert budget.why_not(10.0) == "budget: 5s left, estimated 10s"


def _entry(point: str, repeat: int, stock: dict[str, Any], proxima: dict[str, Any]) -> Any:
    return {
        "point": point,
        "repeat": repeat,
        "modes": {"stock": {"metrics": stock}, "proxima": {"metrics": proxima}},
    }


def test_poisson_rate_from_stocks_burst(model: Path) -> None:
    cfg = mx.resolve(["--model", str(model)])
    raw: dict[str, Any] = {"runs": []}
    rate, why = mx.poisson_rate(cfg, raw, 0)
    assert rate is None and "--poisson-rate" in why
    cfg.poisson_rate = 3.0
    assert mx.poisson_rate(cfg, raw, 0) == (3.0, "--poisson-rate")
    raw["runs"].append(
        _entry("mix-burst", 0, {"request_throughput": 10.0}, {"request_throughput": 50.0})
    )
    raw["runs"].append(
        _entry("mix-burst", 1, {"request_throughput": 20.0}, {"request_throughput": 50.0})
    )
    assert mx.poisson_rate(cfg, raw, 0)[0] == pytest.approx(9.0)  # this repeat's stock
    assert mx.poisson_rate(cfg, raw, 1)[0] == pytest.approx(18.0)
    assert mx.poisson_rate(cfg, raw, 2)[0] == pytest.approx(18.0)  # else the latest


def test_ratio() -> None:
    assert mx.ratio(_entry("p", 0, {"output_throughput": 100}, {"output_throughput": 110})) == (
        pytest.approx(1.1)
    )
    assert mx.ratio(_entry("p", 0, {"output_throughput": 0}, {"output_throughput": 1})) is None
    assert mx.ratio({"modes": {"stock": {"metrics": {"output_throughput": 1}}}}) is None


# --------------------------------------------------------------------------
# parity comparison and classes
# --------------------------------------------------------------------------


def _out(tokens: list[int], gaps: list[float]) -> dict[str, Any]:
    top = [[[t, -0.1], [t + 1, -0.1 - g], [t + 2, -5.0]] for t, g in zip(tokens, gaps, strict=True)]
    return {"tokens": tokens, "top": top}


def test_compare_parity_counts_and_gaps() -> None:
    stock = [
        _out([1, 2, 3, 4], [1, 1, 1, 1]),  # identical
        _out([1, 2, 3, 4], [1, 0.01, 1, 1]),  # diverges at 1, near tie
        _out([5, 6, 7, 8], [2, 2, 2, 0.5]),  # diverges at 3, gap 0.5
        _out([9, 9], [1, 1]),
    ]
    proxima = [
        _out([1, 2, 3, 4], [1, 1, 1, 1]),
        _out([1, 3, 3, 4], [1, 1, 1, 1]),
        _out([5, 6, 7, 9], [1, 1, 1, 1]),
        {"error": "HTTPError"},
    ]
    p = mx.compare_parity(stock, proxima)
    assert (p["requests"], p["compared"], p["failed"], p["identical"]) == (4, 3, 1, 1)
    assert p["total_tokens"] == 12
    assert p["token_agreement"] == pytest.approx((4 + 1 + 3) / 12)
    assert p["positionwise_agreement"] == pytest.approx((4 + 3 + 3) / 12)
    assert [(d["request"], d["position"]) for d in p["diverging"]] == [(1, 1), (2, 3)]
    assert p["diverging"][0]["stock_gap"] == pytest.approx(0.01)
    assert p["divergences"] == 2 and p["near_tie_divergences"] == 1
    assert p["max_divergence_gap"] == pytest.approx(0.5)
    # a shorter sequence diverges where it ends
    q = mx.compare_parity([_out([1, 2], [1, 1])], [_out([1, 2, 3], [1, 1, 1])])
    assert q["diverging"][0]["position"] == 2 and q["diverging"][0]["stock_gap"] is None


def test_class_stats() -> None:
    per_request = {
        "ttfts": [0.1, 0.2, 1.0, 0.0],
        "e2els": [0.5, 0.6, 2.0, None],
        "errors": {"3": "boom"},
    }
    stats = mx.class_stats(["short", "short", "long", "long"], per_request)
    assert stats["short"]["requests"] == 2 and stats["short"]["completed"] == 2
    assert stats["short"]["p50_ttft_ms"] == pytest.approx(150)
    assert stats["short"]["p95_e2el_ms"] == pytest.approx(595)
    assert stats["long"] == {
        "requests": 2,
        "completed": 1,
        "p50_ttft_ms": pytest.approx(1000),
        "p95_ttft_ms": pytest.approx(1000),
        "p50_e2el_ms": pytest.approx(2000),
        "p95_e2el_ms": pytest.approx(2000),
    }
    assert mx.class_stats([None, None], per_request) == {}


# --------------------------------------------------------------------------
# the parity client against a fake /v1/completions
# --------------------------------------------------------------------------


class _Completions(http.server.BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if body["prompt"] == [666]:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b'{"error": "bad prompt"}')
            return
        n = body["max_tokens"]
        logprobs = {
            "tokens": [f"token_id:{10 + i}" for i in range(n)],
            "token_logprobs": [-0.1] * n,
            "top_logprobs": [
                {f"token_id:{11 + i}": -2.0, f"token_id:{10 + i}": -0.1} for i in range(n)
            ],
        }
        data = json.dumps({"choices": [{"logprobs": logprobs, "text": ""}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[str]:
    _Completions.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_parity_request_parses_token_ids_and_top_logprobs(fake_server: str) -> None:
    out = mx.parity_request(fake_server, "m", [7, 8, 9], 3, timeout=10)
    assert out["tokens"] == [10, 11, 12]
    assert out["top"][0] == [[10, -0.1], [11, -2.0]]  # best first
    assert out["seconds"] >= 0
    body = _Completions.bodies[0]
    assert body["prompt"] == [7, 8, 9] and body["temperature"] == 0.0
    assert body["logprobs"] == 5 and body["ignore_eos"] and body["return_tokens_as_token_ids"]
    bad = mx.parity_request(fake_server, "m", [666], 3, timeout=10)
    assert "HTTPError" in bad["error"] and "bad prompt" in bad["error"]
    outs = mx.send_all(fake_server, "m", [[7]] * 5 + [[666]], 2, 3, timeout=10)
    assert [("error" in o) for o in outs] == [False] * 5 + [True]


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def _run(tput: float, preempt: float, classes: dict[str, Any] | None = None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "error": None,
        "metrics": {"output_throughput": tput, "p95_ttft_ms": 50.0, "p95_e2el_ms": 1500.0},
        "counters": {"preemptions": preempt},
        "checks": {"all_completed": True, "client_prompt_len_mismatches": 0},
    }
    if classes:
        run["classes"] = classes
    return run


def _raw(model: str) -> dict[str, Any]:
    cls = {
        "short": {"requests": 27, "p50_ttft_ms": 10, "p95_ttft_ms": 20, "p50_e2el_ms": 900},
        "long": {"requests": 3, "p50_ttft_ms": 100, "p95_ttft_ms": 200, "p95_e2el_ms": 2000},
    }
    runs = []
    for repeat, (s, p) in enumerate(((100.0, 110.0), (100.0, 120.0))):
        runs.append(
            {
                "point": "mix-c8",
                "repeat": repeat,
                "ratio": p / s,
                "modes": {"stock": _run(s, 2), "proxima": _run(p, 0)},
            }
        )
    runs.append(
        {
            "point": "mixed-c64",
            "repeat": 0,
            "ratio": 1.0,
            "modes": {"stock": _run(50, 0, cls), "proxima": _run(50, 0, cls)},
        }
    )
    parity = mx.compare_parity(
        [_out([1, 2], [1, 1]), _out([3, 4], [0.01, 1])],
        [_out([1, 2], [1, 1]), _out([5, 4], [1, 1])],
    )
    runs.append(
        {
            "point": "parity",
            "repeat": 0,
            "ratio": 0.9,
            "parity": parity,
            "modes": {"stock": _run(10, 0), "proxima": _run(9, 0)},
        }
    )
    return {
        "schema": mx.SCHEMA,
        "created": "now",
        "status": "done",
        "config": {
            "model": model,
            "points": ["mix-c8", "mixed-c64", "parity", "poisson"],
            "repeats": 2,
        },
        "servers": {"stock": {"log_facts": {"mode": "off"}}, "proxima": {}},
        "runs": runs,
        "skipped": [{"point": "poisson", "repeat": 0, "reason": "budget: 3s left"}],
    }


def test_report_rows_ratios_classes_parity(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "raw.json").write_text(json.dumps(_raw("/m/llama-3-8b")))
    row = mr.point_row(_raw("m"), "mix-c8")
    assert row is not None
    assert row["ratio"] == pytest.approx(1.15)
    assert (row["ratio_min"], row["ratio_max"]) == (pytest.approx(1.1), pytest.approx(1.2))
    assert row["stock"]["preemptions"] == 2 and row["proxima"]["output_throughput"] == 115
    path = mr.write_report([tmp_path / "a"], plots=False)
    assert path == tmp_path / "a" / "report.md"
    text = path.read_text()
    assert "## llama-3-8b (a)" in text
    assert (
        "| mix-c8 | 100.0 | 115.0 | 1.150 (1.100–1.200) | 2 / 0 | 50.0 / 50.0 | 1.50 / 1.50 |"
        in (text)
    )
    assert "| long | 3 | 100 / 100 | 200 / 200 | – / – | 2.00 / 2.00 |" in text
    assert "**1/2 requests identical**" in text and "1 at near-ties" in text
    assert "skipped poisson (repeat 0): budget: 3s left" in text
    assert "| poisson |" not in text


def test_report_several_folders_and_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "raw.json").write_text(json.dumps(_raw(f"/m/{name}-model")))
    monkeypatch.chdir(tmp_path)
    assert mr.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = (tmp_path / "matrix-report.md").read_text()
    assert "## a-model (a)" in text and "## b-model (b)" in text
    assert (tmp_path / "matrix-ratio.png").read_bytes()[:4] == b"\x89PNG"


def test_report_refuses_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw.json").write_text(json.dumps({"schema": "proxima-serve-ab/1"}))
    assert mr.main([str(tmp_path)]) == 2
    assert "not a matrix raw.json" in capsys.readouterr().err
    assert mr.main([str(tmp_path / "missing")]) == 2


# --------------------------------------------------------------------------
# the point loop without servers
# --------------------------------------------------------------------------


def _state(cfg: mx.Config, budget: mx.Budget) -> mx.RunState:
    state = mx.RunState(cfg=cfg, raw={"runs": [], "skipped": []}, log=lambda m: None, budget=budget)
    # only base_url is used here: _wait_idle and _check_alive are replaced
    state.servers = {m: cast(Any, SimpleNamespace(base_url="http://x")) for m in mx.MODES}
    state.prepared = {
        (0, p.name): mx.Prepared(Path("w.jsonl"), [5], [3], [None], {"file": "w.jsonl"})
        for p in mx.POINTS
    }
    cfg.out.mkdir(parents=True, exist_ok=True)
    return state


def test_run_point_skips_and_alternates(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = mx.resolve(["--model", str(model), "--out", str(model.parent / "out")])
    by_name = {p.name: p for p in mx.POINTS}
    budget = mx.Budget(100.0, 30.0)
    state = _state(cfg, budget)
    calls: list[tuple[str, str]] = []

    def fake_run_mode(
        st: mx.RunState, spec: mx.PointSpec, repeat: int, mode: str, rate: Any
    ) -> dict[str, Any]:
        calls.append((spec.name, mode))
        budget.t0 -= 30.0  # each run "takes" 30 s
        tput = 100.0 if mode == "stock" else 125.0
        return {"wall_s": 30.0, "metrics": {"output_throughput": tput, "request_throughput": 2.0}}

    monkeypatch.setattr(mx, "_run_mode", fake_run_mode)
    monkeypatch.setattr(mx, "_wait_idle", lambda url: None)
    monkeypatch.setattr(mx, "_check_alive", lambda servers: None)
    monkeypatch.setattr(mx, "_finish_entry", lambda st, e: e.update(ratio=mx.ratio(e)))

    # no mix-burst yet and no --poisson-rate: skipped with the reason
    mx.run_point(state, by_name["poisson"], 0, 0)
    assert state.raw["skipped"][-1]["point"] == "poisson"
    assert "--poisson-rate" in state.raw["skipped"][-1]["reason"]
    # index 1: proxima first; the default 30 s estimate fits in 100 s
    mx.run_point(state, by_name["mix-burst"], 0, 1)
    assert calls == [("mix-burst", "proxima"), ("mix-burst", "stock")]
    entry = state.raw["runs"][-1]
    assert entry["order"] == ["proxima", "stock"] and entry["ratio"] == pytest.approx(1.25)
    # 40 s left: poisson now runs at 0.9 x stock's 2 req/s, but after one mode
    # (30 s) the second mode's estimate (30 s) no longer fits in 10 s
    calls.clear()
    budget.walls.clear()
    mx.run_point(state, by_name["poisson"], 0, 2)
    assert calls == [("poisson", "stock")]
    entry = state.raw["runs"][-1]
    assert entry["request_rate"] == pytest.approx(1.8)
    assert set(entry["modes"]) == {"stock"}
    skipped = state.raw["skipped"][-1]
    assert skipped["mode"] == "proxima" and skipped["reason"].startswith("budget: 10s left")
    # 10 s left: a point estimated at 30 s does not start
    calls.clear()
    mx.run_point(state, by_name["mix-c8"], 0, 3)
    assert calls == [] and state.raw["skipped"][-1]["point"] == "mix-c8"
    saved = json.loads((cfg.out / "raw.json").read_text())  # rewritten as it went
    assert [s["point"] for s in saved["skipped"]] == ["poisson", "poisson", "mix-c8"]


class _FakeServer:
    """Stands in for bench.server.Server in start_servers."""

    def __init__(self, mode: str, folder: Path, fail: bool) -> None:
        self.mode, self.fail = mode, fail
        self.port = 10000 + len(mode)
        self.command = ["python", "-m", "server", mode]
        self.log_path = folder / f"server-{mode}.log"
        self.base_url = "http://127.0.0.1:9"  # nothing listens: /metrics fails quietly
        self.proc: Any = None
        self.stopped = False

    def start(self) -> None:
        self.proc = SimpleNamespace(pid=4242)
        self.log_path.write_text(f"{self.mode} log\n")

    def wait_healthy(self, timeout: float, progress: Any = None) -> float:
        if self.fail:
            raise mx.ServerError(f"{self.mode} ran out of memory")
        return 1.5

    def log_facts(self) -> dict[str, Any]:
        return {"mode": "off" if self.mode == "stock" else "on"}

    def stop(self, timeout: float = 30.0) -> int:
        self.stopped = True
        return 0


def test_failed_concurrent_start_starts_only_the_failed_server_again(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On an H100 one of two servers died at start (a port both drew); stopping the healthy one
    # too and starting both again one by one cost the plan its budget.
    cfg = mx.resolve(["--model", str(model), "--out", str(tmp_path / "out")])
    cfg.out.mkdir()
    made: list[dict[str, _FakeServer]] = []
    fail_next = [True]  # the concurrent attempt: proxima fails

    def fake_make_servers(cfg: mx.Config, modes: Any = None) -> dict[str, Any]:
        fail, fail_next[0] = fail_next[0], False
        wanted = [m for m in mx.MODES if modes is None or m in modes]
        made.append({m: _FakeServer(m, cfg.out, fail and m == "proxima") for m in wanted})
        return made[-1]

    monkeypatch.setattr(mx, "make_servers", fake_make_servers)
    raw = {"servers": {}, "start": {}}
    state = mx.RunState(cfg=cfg, raw=raw, log=lambda m: None, budget=mx.Budget(None, 60))
    loaded: list[int] = []
    mx.start_servers(state, lambda: loaded.append(1))
    assert loaded == [1]  # the workloads are written once
    assert len(made) == 2 and list(made[1]) == ["proxima"]  # only the failed one again
    assert made[0]["proxima"].stopped and not made[0]["stock"].stopped
    assert raw["start"]["method"] == "concurrent, then one by one"
    assert raw["start"]["retried"] == ["proxima"]
    assert "proxima ran out of memory" in raw["start"]["concurrent_error"]
    assert (cfg.out / "server-proxima.concurrent.log").read_text() == "proxima log\n"
    assert state.servers == {"stock": made[0]["stock"], "proxima": made[1]["proxima"]}
    assert list(state.servers) == list(mx.MODES)
    for mode in mx.MODES:
        assert raw["servers"][mode]["startup_s"] == 1.5 and raw["servers"][mode]["pid"] == 4242
    # a server that fails again alone ends the start
    fail_next[0] = True
    made.clear()

    def always_failing(cfg: mx.Config, modes: Any = None) -> dict[str, Any]:
        wanted = [m for m in mx.MODES if modes is None or m in modes]
        made.append({m: _FakeServer(m, cfg.out, m == "proxima") for m in wanted})
        return made[-1]

    monkeypatch.setattr(mx, "make_servers", always_failing)
    state = mx.RunState(
        cfg=cfg, raw={"servers": {}, "start": {}}, log=lambda m: None, budget=mx.Budget(None, 60)
    )
    with pytest.raises(mx.ServerError, match="proxima ran out of memory"):
        mx.start_servers(state, lambda: None)
    assert len(made) == 2
    # --sequential-start: one attempt, one by one
    monkeypatch.setattr(mx, "make_servers", fake_make_servers)
    fail_next[0] = False
    made.clear()
    cfg.sequential_start = True
    state = mx.RunState(cfg=cfg, raw={"servers": {}}, log=lambda m: None, budget=mx.Budget(None, 1))
    mx.start_servers(state, lambda: None)
    assert len(made) == 1 and state.raw["start"]["method"] == "sequential"
    assert "concurrent_error" not in state.raw["start"]


# --------------------------------------------------------------------------
# more modes: --mode NAME=ARGS
# --------------------------------------------------------------------------

ADMIT = "--proxima-admission stock"


def test_parse_modes_and_server_args(model: Path) -> None:
    assert mx.parse_modes([f"admit-stock={ADMIT}", "aa2=", "B-1= --foo 'a b'"]) == {
        "admit-stock": ["--proxima-admission", "stock"],
        "aa2": [],
        "B-1": ["--foo", "a b"],
    }
    cfg = mx.resolve(
        [
            "--model",
            str(model),
            "--server-args",
            "--dtype bfloat16",
            "--mode",
            f"admit-stock={ADMIT}",
            "--mode-args",
            "proxima=--proxima-admission conservative",
            "--mode",
            "aa=",
        ]
    )
    assert cfg.modes == ["stock", "proxima", "admit-stock", "aa"]
    assert cfg.server_argv("admit-stock") == ["--dtype", "bfloat16", *ADMIT.split()]
    assert cfg.server_argv("aa") == ["--dtype", "bfloat16"]  # an A/A control
    assert cfg.server_argv("proxima")[-1] == "conservative"
    assert cfg.server_argv("stock")[:2] == ["--proxima", "off"]
    record = cfg.to_dict()
    assert record["modes"] == cfg.modes and set(record["server_argv"]) == set(cfg.modes)
    assert mx.resolve(["--model", str(model)]).modes == ["stock", "proxima"]
    # --max-model-len of an extra mode caps the workloads too
    cfg = mx.resolve(["--model", str(model), "--mode", "short=--max-model-len 512"])
    assert cfg.max_total_len == 512


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("stock=--foo", "built-in mode; use --mode-args stock=ARGS"),
        ("proxima=", "built-in mode"),
        ("admit stock=--foo", "NAME of letters, digits and '-'"),
        ("admit_stock=--foo", "NAME of letters, digits and '-'"),
        ("=--foo", "expected NAME=ARGS"),
        ("noequals", "expected NAME=ARGS"),
        ("x=--proxima on", "--proxima is set by the matrix"),
        ("x=--port=1", "--port is set by the matrix"),
        ("x='unclosed", "x='unclosed"),
    ],
)
def test_bad_modes(model: Path, item: str, message: str) -> None:
    with pytest.raises(mx.MatrixError, match=message):
        mx.resolve(["--model", str(model), "--mode", item])


def test_mode_given_twice(model: Path) -> None:
    with pytest.raises(mx.MatrixError, match="--mode a given twice"):
        mx.resolve(["--model", str(model), "--mode", "a=", "--mode", "a=--foo"])


def test_run_order_rotates() -> None:
    three = ["stock", "proxima", "admit-stock"]
    orders = [mx.run_order(three, i) for i in range(6)]
    assert orders[:3] == [
        ["stock", "proxima", "admit-stock"],
        ["proxima", "admit-stock", "stock"],
        ["admit-stock", "stock", "proxima"],
    ]
    assert orders[3:] == orders[:3]
    # every mode takes every position equally often over M consecutive points
    for position in range(3):
        assert sorted(o[position] for o in orders[1:4]) == sorted(three)
    assert mx.run_order(three, 0, repeat=1) == orders[1]  # shifted again per repeat
    # two modes: the old alternation (stock first when index + repeat is even)
    two = list(mx.MODES)
    for index in range(4):
        for repeat in range(2):
            want = two if (index + repeat) % 2 == 0 else two[::-1]
            assert mx.run_order(two, index, repeat) == want


def _three_mode_cfg(model: Path) -> mx.Config:
    return mx.resolve(
        [
            "--model",
            str(model),
            "--mode",
            f"admit-stock={ADMIT}",
            "--out",
            str(model.parent / "out3"),
        ]
    )


def test_run_point_three_modes(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _three_mode_cfg(model)
    by_name = {p.name: p for p in mx.POINTS}
    budget = mx.Budget(200.0, 30.0, cfg.modes)
    state = _state(cfg, budget)
    state.servers = {m: cast(Any, SimpleNamespace(base_url="http://x")) for m in cfg.modes}
    calls: list[tuple[str, str]] = []
    tputs = {"stock": 100.0, "proxima": 125.0, "admit-stock": 90.0}

    def fake_run_mode(
        st: mx.RunState, spec: mx.PointSpec, repeat: int, mode: str, rate: Any
    ) -> dict[str, Any]:
        calls.append((spec.name, mode))
        budget.t0 -= 30.0  # each run "takes" 30 s
        metrics = {"output_throughput": tputs[mode], "request_throughput": 2.0}
        return {"wall_s": 30.0, "metrics": metrics, "counters": {"preemptions": 0}}

    monkeypatch.setattr(mx, "_run_mode", fake_run_mode)
    monkeypatch.setattr(mx, "_wait_idle", lambda url: None)
    monkeypatch.setattr(mx, "_check_alive", lambda servers: None)

    # 200 s left, no estimate yet: the default 30 s fits; index 1 starts with mode 1
    mx.run_point(state, by_name["mix-burst"], 0, 1)
    assert calls == [("mix-burst", m) for m in ("proxima", "admit-stock", "stock")]
    entry = state.raw["runs"][-1]
    assert entry["order"] == ["proxima", "admit-stock", "stock"]
    assert entry["ratios"] == {"proxima": pytest.approx(1.25), "admit-stock": pytest.approx(0.9)}
    assert entry["ratio"] == pytest.approx(1.25)  # proxima's, as before
    # 110 s left: index 2 starts with admit-stock
    calls.clear()
    mx.run_point(state, by_name["mix-c8"], 0, 2)
    assert [m for _p, m in calls] == ["admit-stock", "stock", "proxima"]
    assert budget.point_estimate("mix-c8") == 90.0
    # 95 s left: poisson (0.9 x stock's mix-burst 2 req/s), index 3 starts
    # with mode 0 again; each later mode fits the previous mode's 30 s
    calls.clear()
    budget.t0 += 75.0
    mx.run_point(state, by_name["poisson"], 0, 3)
    assert [m for _p, m in calls] == ["stock", "proxima", "admit-stock"]
    assert state.raw["runs"][-1]["request_rate"] == pytest.approx(1.8)
    # 65 s left, mix-c32 estimated at the default (20 s): two modes run, then
    # the third's estimate (the previous mode's 30 s) does not fit the 5 s left
    calls.clear()
    budget.t0 += 60.0
    budget.default_s = 20.0
    mx.run_point(state, by_name["mix-c32"], 0, 4)
    assert [m for _p, m in calls] == ["proxima", "admit-stock"]
    assert list(state.raw["runs"][-1]["modes"]) == ["proxima", "admit-stock"]
    assert state.raw["runs"][-1]["ratios"] == {"proxima": None, "admit-stock": None}
    skipped = state.raw["skipped"][-1]
    assert skipped["mode"] == "stock" and skipped["reason"] == "budget: 5s left, estimated 30s"


def test_run_point_skips_every_later_mode(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _three_mode_cfg(model)
    budget = mx.Budget(40.0, 30.0, cfg.modes)
    state = _state(cfg, budget)
    state.servers = {m: cast(Any, SimpleNamespace(base_url="http://x")) for m in cfg.modes}

    def fake_run_mode(st: Any, spec: Any, repeat: int, mode: str, rate: Any) -> dict[str, Any]:
        budget.t0 -= 30.0
        return {"wall_s": 30.0, "metrics": {"output_throughput": 1.0}}

    monkeypatch.setattr(mx, "_run_mode", fake_run_mode)
    monkeypatch.setattr(mx, "_wait_idle", lambda url: None)
    monkeypatch.setattr(mx, "_check_alive", lambda servers: None)
    mx.run_point(state, {p.name: p for p in mx.POINTS}["mix-c8"], 0, 0)
    assert list(state.raw["runs"][-1]["modes"]) == ["stock"]
    assert [(s["mode"], s["point"]) for s in state.raw["skipped"]] == [
        ("proxima", "mix-c8"),
        ("admit-stock", "mix-c8"),
    ]


def test_parity_compared_for_every_mode(model: Path, tmp_path: Path) -> None:
    cfg = _three_mode_cfg(model)
    state = _state(cfg, mx.Budget(None, 1.0, cfg.modes))
    outputs = {
        "stock": [_out([1, 2], [1, 1]), _out([3, 4], [1, 1])],
        "proxima": [_out([1, 2], [1, 1]), _out([3, 4], [1, 1])],
        "admit-stock": [_out([1, 2], [1, 1]), _out([3, 5], [1, 1])],
    }
    modes = {}
    for mode, requests in outputs.items():
        path = tmp_path / f"parity-{mode}.json"
        path.write_text(json.dumps({"requests": requests}))
        modes[mode] = {"detail_file": str(path), "metrics": {"output_throughput": 10.0}}
    entry = {"point": "parity", "repeat": 0, "order": cfg.modes, "modes": modes}
    mx._finish_entry(state, entry)
    assert entry["parity"]["identical"] == 2
    assert entry["parity_vs_stock"]["admit-stock"]["identical"] == 1
    assert entry["ratios"] == {"proxima": 1.0, "admit-stock": 1.0}


def test_proxima_counter_deltas() -> None:
    series = mx.ms.TimeSeries()
    series.add(0.0, {"vllm:num_preemptions_total": 1.0, "proxima:steps_total": 100.0})
    series.add(
        1.0,
        {
            "vllm:num_preemptions_total": 3.0,
            "proxima:steps_total": 150.0,
            "proxima:schedule_seconds_total": 0.25,  # first exported mid-run: from 0
            "proxima:kv_slots_used": 7.0,  # a gauge: not a counter delta
        },
    )
    series.add(2.0, {"proxima:steps_total": 160.0, "proxima:schedule_seconds_total": 0.5})
    assert mx.proxima_counters(series) == {
        "proxima:schedule_seconds_total": 0.5,
        "proxima:steps_total": 60.0,
    }
    series.add(3.0, {"proxima:kv_slots_total": 9.0})  # a gauge ending in _total
    assert "proxima:kv_slots_total" in mx.proxima_counters(series)
    text = (
        "# HELP proxima:kv_slots_total Usable KV token slots.\n"
        "# TYPE proxima:kv_slots_total gauge\n"
        'proxima:kv_slots_total{engine="0"} 9.0\n'
        "# TYPE proxima:steps counter\n"
        'proxima:steps_total{engine="0"} 160.0\n'
    )
    gauges = mx.gauge_names(text)
    assert gauges == {"proxima:kv_slots_total"}
    counters = mx._counters(series, gauges)
    assert counters["preemptions"] == 2.0
    assert counters["proxima"] == {
        "proxima:schedule_seconds_total": 0.5,
        "proxima:steps_total": 60.0,
    }
    assert mx.proxima_counters(mx.ms.TimeSeries()) == {}
    assert mx._gauges("http://127.0.0.1:9") == set()  # nothing listens: no names


def test_three_servers_start_concurrently(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _three_mode_cfg(model)
    cfg.out = tmp_path / "out"
    cfg.out.mkdir()
    made: list[dict[str, _FakeServer]] = []
    fail_next = [True]  # the concurrent attempt: admit-stock fails

    def fake_make_servers(cfg: mx.Config, modes: Any = None) -> dict[str, Any]:
        fail, fail_next[0] = fail_next[0], False
        wanted = [m for m in cfg.modes if modes is None or m in modes]
        made.append({m: _FakeServer(m, cfg.out, fail and m == "admit-stock") for m in wanted})
        return made[-1]

    monkeypatch.setattr(mx, "make_servers", fake_make_servers)
    raw: dict[str, Any] = {"servers": {}, "start": {}}
    state = mx.RunState(cfg=cfg, raw=raw, log=lambda m: None, budget=mx.Budget(None, 60))
    mx.start_servers(state, lambda: None)
    assert len(made) == 2 and list(made[1]) == ["admit-stock"]
    assert [s.stopped for s in made[0].values()] == [m == "admit-stock" for m in made[0]]
    assert "admit-stock ran out of memory" in raw["start"]["concurrent_error"]
    assert raw["start"]["method"] == "concurrent, then one by one"
    assert list(raw["servers"]) == cfg.modes
    assert (cfg.out / "server-admit-stock.concurrent.log").is_file()
    assert all(raw["servers"][m]["startup_s"] == 1.5 for m in cfg.modes)


def test_make_servers_one_per_mode(model: Path, tmp_path: Path) -> None:
    cfg = _three_mode_cfg(model)
    cfg.out = tmp_path
    servers = mx.make_servers(cfg)
    assert list(servers) == cfg.modes
    assert len({s.port for s in servers.values()}) == 3
    assert servers["admit-stock"].log_path == tmp_path / "server-admit-stock.log"
    assert servers["admit-stock"].command[-2:] == ["--proxima-admission", "stock"]
    assert "--proxima" not in servers["admit-stock"].command


def test_make_servers_give_each_server_its_own_internal_port_base(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Servers started at once once picked the same rendezvous port (EADDRINUSE): with VLLM_PORT
    # set apart per server, vLLM scans upward from each base instead.
    monkeypatch.delenv("VLLM_PORT", raising=False)
    cfg = _three_mode_cfg(model)
    cfg.out = tmp_path
    bases = sorted(int(s.env["VLLM_PORT"]) for s in mx.make_servers(cfg).values())
    assert len(set(bases)) == 3
    assert min(b - a for a, b in itertools.pairwise(bases)) >= 100
    assert all(b < 32768 for b in bases)  # below Linux's ephemeral range, where port 0 lands
    # a VLLM_PORT the user set wins, in --env or in the environment
    cfg.env = {"VLLM_PORT": "40000"}
    assert {s.env["VLLM_PORT"] for s in mx.make_servers(cfg).values()} == {"40000"}
    cfg.env = {}
    monkeypatch.setenv("VLLM_PORT", "41000")
    assert {s.env["VLLM_PORT"] for s in mx.make_servers(cfg).values()} == {"41000"}


# --------------------------------------------------------------------------
# report with three modes
# --------------------------------------------------------------------------


def _cpu(steps: float, schedule: float, admission: float) -> dict[str, float]:
    return {
        "proxima:steps_total": steps,
        "proxima:schedule_seconds_total": schedule,
        "proxima:admission_seconds_total": admission,
        "proxima:preemptions_total": 0.0,
    }


def _raw3(model: str) -> dict[str, Any]:
    modes = ["stock", "proxima", "admit-stock"]
    runs = []
    for repeat, tputs in enumerate(((100.0, 110.0, 95.0), (100.0, 120.0, 105.0))):
        entry_modes = {
            m: _run(t, 1 if m == "stock" else 0) for m, t in zip(modes, tputs, strict=True)
        }
        entry_modes["proxima"]["counters"]["proxima"] = _cpu(1000, 0.5, 0.1)
        entry_modes["admit-stock"]["counters"]["proxima"] = _cpu(500 * (1 + repeat), 0.6, 0.0)
        entry_modes["stock"]["counters"]["proxima"] = {}
        runs.append(
            {
                "point": "mix-c8",
                "repeat": repeat,
                "order": mx.run_order(modes, 0, repeat),
                "ratio": tputs[1] / tputs[0],
                "ratios": {"proxima": tputs[1] / tputs[0], "admit-stock": tputs[2] / tputs[0]},
                "modes": entry_modes,
            }
        )
    cls = {"short": {"requests": 27, "p95_ttft_ms": 20}, "long": {"requests": 3}}
    runs.append(
        {
            "point": "mixed-c64",
            "repeat": 0,
            "ratio": 1.0,
            "ratios": {"proxima": 1.0, "admit-stock": None},
            "modes": {"stock": _run(50, 0, cls), "proxima": _run(50, 0, cls)},
        }
    )
    same = [_out([1, 2], [1, 1]), _out([3, 4], [0.01, 1])]
    runs.append(
        {
            "point": "parity",
            "repeat": 0,
            "ratio": 1.0,
            "ratios": {"proxima": 1.0, "admit-stock": 0.5},
            "parity": mx.compare_parity(same, same),
            "parity_vs_stock": {
                "admit-stock": mx.compare_parity(same, [_out([1, 2], [1, 1]), _out([5, 4], [1, 1])])
            },
            "modes": {"stock": _run(10, 0), "proxima": _run(10, 0), "admit-stock": _run(5, 0)},
        }
    )
    return {
        "schema": mx.SCHEMA,
        "created": "now",
        "status": "done",
        "config": {
            "model": model,
            "modes": modes,
            "mode_args": {"admit-stock": ADMIT.split()},
            "points": ["mix-c8", "mixed-c64", "parity"],
            "repeats": 2,
        },
        "servers": {m: {"log_facts": {"mode": "off" if m == "stock" else "on"}} for m in modes},
        "runs": runs,
        "skipped": [{"point": "mixed-c64", "repeat": 0, "mode": "admit-stock", "reason": "budget"}],
    }


def test_report_three_modes(tmp_path: Path) -> None:
    raw = _raw3("/m/llama-3-8b")
    assert mr.modes_of(raw) == ["stock", "proxima", "admit-stock"]
    row = mr.point_row(raw, "mix-c8")
    assert row is not None
    assert row["admit-stock"]["ratio"] == pytest.approx(1.0)
    assert (row["admit-stock"]["ratio_min"], row["admit-stock"]["ratio_max"]) == (
        pytest.approx(0.95),
        pytest.approx(1.05),
    )
    assert row["ratio"] == pytest.approx(1.15)  # proxima's at the top level, as before
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "raw.json").write_text(json.dumps(raw))
    text = mr.write_report([tmp_path / "a"], plots=False).read_text()
    assert (
        "| point | stock tok/s | proxima tok/s | admit-stock tok/s | proxima / stock "
        "| admit-stock / stock | preemptions | P95 TTFT ms | P95 E2E s |"
    ) in text
    assert (
        "| mix-c8 | 100.0 | 115.0 | 100.0 | 1.150 (1.100–1.200) | 1.000 (0.950–1.050) "
        "| 1 / 0 / 0 | 50.0 / 50.0 / 50.0 | 1.50 / 1.50 / 1.50 |"
    ) in text
    assert "| mixed-c64 | 50.0 | 50.0 | – | 1.000 | – | 0 / 0 / – |" in text
    assert "are means over repeats, stock / proxima / admit-stock." in text
    # scheduler CPU: seconds over steps of all repeats, in ms per step
    assert "### Scheduler CPU per step (ms)" in text
    assert (
        "| point | proxima steps | proxima schedule | proxima admission | admit-stock steps "
        "| admit-stock schedule | admit-stock admission |"
    ) in text
    assert "| mix-c8 | 1,000 | 0.500 | 0.100 | 750 | 0.800 | 0.000 |" in text
    assert "| mixed-c64 |" not in text.split("### Scheduler CPU")[1].split("###")[0]
    assert "### mixed-c64: per class (stock / proxima / admit-stock)" in text
    assert "| short | 27 | – / – / – | 20.0 / 20.0 / – |" in text
    assert "- repeat 0, proxima vs stock: **2/2 requests identical**" in text
    assert "- repeat 0, admit-stock vs stock: **1/2 requests identical**" in text
    assert "skipped mixed-c64 (repeat 0, admit-stock): budget" in text
    assert "  - admit-stock: started" in text


def test_report_two_modes_without_ratios_or_cpu(tmp_path: Path) -> None:
    raw = _raw("/m/x")  # as written before --mode: no modes, no ratios, no proxima counters
    assert mr.modes_of(raw) == ["stock", "proxima"]
    text = mr.render([(tmp_path, raw)], None)
    assert "| point | stock tok/s | proxima tok/s | proxima / stock | preemptions |" in text
    assert "Scheduler CPU" not in text
    assert "- repeat 0: **1/2 requests identical**" in text  # no "vs stock" label
    # a ratio missing from the entry comes from the metrics
    del raw["runs"][0]["ratio"]
    assert mr.entry_ratio(raw["runs"][0], "proxima") == pytest.approx(1.1)


def test_report_plot_three_modes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    for name, raw in (("a", _raw3("/m/a")), ("b", _raw("/m/b"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "raw.json").write_text(json.dumps(raw))
    out = mr.write_report([tmp_path / "a", tmp_path / "b"], tmp_path / "r.md")
    text = out.read_text()
    assert "## a (a)" in text and "## b (b)" in text
    assert "admit-stock / stock" in text.split("## b (b)")[0]
    assert "admit-stock" not in text.split("## b (b)")[1]
    assert (tmp_path / "matrix-ratio.png").read_bytes()[:4] == b"\x89PNG"


# --------------------------------------------------------------------------
# --pair: a second model folder, its own stock and proxima servers
# --------------------------------------------------------------------------


def _pair_cfg(model: Path) -> mx.Config:
    sw = model.parent / "sw"
    sw.mkdir(exist_ok=True)
    (sw / "config.json").write_text((model / "config.json").read_text())
    return mx.resolve(
        [
            "--model", str(model),
            "--server-args", "--served-model-name m",
            "--pair", f"sw={sw}",
            "--out", str(model.parent / "out"),
        ]
    )  # fmt: skip


def test_pair_adds_a_stock_and_a_proxima_server_on_its_folder(model: Path) -> None:
    cfg = _pair_cfg(model)
    assert cfg.modes == ["stock", "proxima", "sw-stock", "sw"]
    assert [cfg.is_stock(m) for m in cfg.modes] == [True, False, True, False]
    assert [cfg.base_of(m) for m in ("proxima", "sw")] == ["stock", "sw-stock"]
    assert cfg.model_of("sw") == cfg.model_of("sw-stock") == str(model.parent / "sw")
    assert cfg.model_of("proxima") == cfg.model_of("stock") == str(model.resolve())
    assert cfg.server_argv("sw-stock")[:2] == ["--proxima", "off"]
    assert "--proxima" not in cfg.server_argv("sw")
    assert cfg.to_dict()["bases"] == {"proxima": "stock", "sw": "sw-stock"}
    servers = mx.make_servers(cfg)
    assert servers["sw"].command[servers["sw"].command.index("--model") + 1] == cfg.model_of("sw")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pair", "sw=/nonexistent"], "no config.json"),
        (["--pair", "sw"], "NAME=FOLDER"),
        (["--pair", "proxima=."], "taken"),
        (["--mode", "sw-stock=", "--pair", "sw=."], "taken"),
    ],
)
def test_bad_pairs(model: Path, extra: list[str], message: str) -> None:
    with pytest.raises(mx.MatrixError, match=message):
        mx.resolve(["--model", str(model), "--server-args", "--served-model-name m", *extra])


def test_pair_needs_one_served_name(model: Path) -> None:
    with pytest.raises(mx.MatrixError, match="served-model-name"):
        mx.resolve(["--model", str(model), "--pair", f"sw={model}"])


def test_pair_ratio_and_parity_against_its_own_stock(model: Path, tmp_path: Path) -> None:
    cfg = _pair_cfg(model)
    state = _state(cfg, mx.Budget(None, 1.0, cfg.modes))
    tputs = {"stock": 100.0, "proxima": 110.0, "sw-stock": 200.0, "sw": 180.0}
    outputs = {  # the sliding-window model's tokens differ from the full model's
        "stock": [_out([1, 2], [1, 1])],
        "proxima": [_out([1, 2], [1, 1])],
        "sw-stock": [_out([7, 8], [1, 1])],
        "sw": [_out([7, 8], [1, 1])],
    }
    modes = {}
    for mode, requests in outputs.items():
        path = tmp_path / f"parity-{mode}.json"
        path.write_text(json.dumps({"requests": requests}))
        modes[mode] = {"detail_file": str(path), "metrics": {"output_throughput": tputs[mode]}}
    entry = {"point": "parity", "repeat": 0, "order": cfg.modes, "modes": modes}
    mx._finish_entry(state, entry)
    assert entry["ratios"] == {"proxima": pytest.approx(1.1), "sw": pytest.approx(0.9)}
    assert entry["parity"]["identical"] == 1
    assert entry["parity_vs_stock"]["sw"]["identical"] == 1  # against sw-stock, not stock
    raw = {
        "schema": mx.SCHEMA,
        "config": {"modes": cfg.modes, "bases": cfg.to_dict()["bases"], "points": ["parity"]},
        "runs": [entry],
    }
    assert mr.bases_of(raw) == {"proxima": "stock", "sw": "sw-stock"}
    table = "\n".join(mr.points_table(raw))
    assert "| proxima / stock | sw / sw-stock |" in table and "sw-stock / stock" not in table
    assert "| parity | 100.0 | 110.0 | 200.0 | 180.0 | 1.100 | 0.900 |" in table
    assert any("sw vs sw-stock" in line for line in mr.parity_lines(raw))


def test_report_and_plot_of_a_pair_run(tmp_path: Path) -> None:
    """A --pair run's stock servers are bases: the plot has no series for them (it broke
    on the first GPU run with a pair: KeyError 'ratio')."""
    pytest.importorskip("matplotlib")
    modes = ["stock", "proxima", "sw-stock", "sw"]
    runs = [
        {
            "point": "mix-c32",
            "repeat": r,
            "ratios": {"proxima": 1.0 + r / 10, "sw": 0.9},
            "modes": {m: _run(100.0 + r, 0) for m in modes},
        }
        for r in range(2)
    ]
    raw = {
        "schema": mx.SCHEMA,
        "created": "now",
        "status": "done",
        "config": {
            "model": "/m/x",
            "modes": modes,
            "bases": {"proxima": "stock", "sw": "sw-stock"},
            "points": ["mix-c32"],
            "repeats": 2,
        },
        "servers": {},
        "runs": runs,
        "skipped": [],
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "raw.json").write_text(json.dumps(raw))
    text = mr.write_report([tmp_path / "a"], plots=True).read_text()
    row = "| mix-c32 | 100.5 | 100.5 | 100.5 | 100.5 | 1.050 (1.000–1.100) | 0.900 (0.900–0.900) |"
    assert row in text
    assert (tmp_path / "a" / mr.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"


def test_a_pair_on_the_main_model_is_an_a_a_control(model: Path, tmp_path: Path) -> None:
    """``--pair aa=MODEL``: aa-stock is compared with stock too (two stock servers: the
    machine's spread), aa with aa-stock (a second proxima / stock figure)."""
    cfg = mx.resolve(
        [
            "--model", str(model),
            "--server-args", "--served-model-name m",
            "--pair", f"aa={model}",
            "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    assert cfg.modes == ["stock", "proxima", "aa-stock", "aa"]
    assert cfg.bases() == {"proxima": "stock", "aa-stock": "stock", "aa": "aa-stock"}
    assert cfg.to_dict()["bases"] == cfg.bases()
    assert cfg.server_argv("aa-stock")[:2] == ["--proxima", "off"]  # still a stock server
    state = _state(cfg, mx.Budget(None, 1.0, cfg.modes))
    tputs = {"stock": 100.0, "proxima": 95.0, "aa-stock": 104.0, "aa": 101.0}
    entry = {
        "point": "mix-c32",
        "repeat": 0,
        "order": cfg.modes,
        "modes": {m: {"metrics": {"output_throughput": t}} for m, t in tputs.items()},
    }
    mx._finish_entry(state, entry)
    assert entry["ratios"] == {
        "proxima": pytest.approx(0.95),
        "aa-stock": pytest.approx(1.04),
        "aa": pytest.approx(101 / 104),
    }
    raw = {"schema": mx.SCHEMA, "config": {"modes": cfg.modes, "bases": cfg.bases()}}
    raw["runs"] = [entry]
    assert "| aa-stock / stock |" in "\n".join(mr.points_table(raw))


def test_control_adds_one_stock_server_compared_with_stock(model: Path, tmp_path: Path) -> None:
    """``--control``: a third server, ``stock-b`` (``--proxima off``, on ``--model``),
    compared with stock: the A/A spread with three servers instead of a pair's four."""
    cfg = mx.resolve(["--model", str(model), "--control", "--out", str(tmp_path / "out")])
    assert cfg.modes == ["stock", "proxima", mx.CONTROL]
    assert cfg.bases() == {"proxima": "stock", mx.CONTROL: "stock"}
    assert cfg.server_argv(mx.CONTROL)[:2] == ["--proxima", "off"]
    assert cfg.model_of(mx.CONTROL) == cfg.model and cfg.to_dict()["control"] is True
    state = _state(cfg, mx.Budget(None, 1.0, cfg.modes))
    tputs = {"stock": 100.0, "proxima": 97.0, mx.CONTROL: 96.0}
    entry = {
        "point": "sysprompt-c64",
        "repeat": 0,
        "order": cfg.modes,
        "modes": {m: {"metrics": {"output_throughput": t}} for m, t in tputs.items()},
    }
    mx._finish_entry(state, entry)
    assert entry["ratios"] == {"proxima": pytest.approx(0.97), mx.CONTROL: pytest.approx(0.96)}
    raw = {"schema": mx.SCHEMA, "config": {"modes": cfg.modes, "bases": cfg.bases()}}
    raw["runs"] = [entry]
    assert f"| {mx.CONTROL} / stock |" in "\n".join(mr.points_table(raw))
    # without --control the name is free for an extra mode, with it taken
    assert mx.resolve(["--model", str(model), "--mode", "stock-b="]).modes[-1] == "stock-b"
    with pytest.raises(mx.MatrixError, match="--control"):
        mx.resolve(["--model", str(model), "--control", "--mode", "stock-b="])


def test_requests_scale_lengthens_points_without_changing_lengths(model: Path) -> None:
    base = ["--model", str(model), "--points", "mix-c32"]
    one, four = mx.resolve(base), mx.resolve([*base, "--requests-scale", "4"])
    spec = one.points[0]
    assert (one.num_requests(spec), four.num_requests(spec)) == (128, 512)
    assert four.to_dict()["requests_scale"] == 4.0 and four.scale == one.scale == 1.0
    with pytest.raises(mx.MatrixError, match="requests-scale"):
        mx.resolve([*base, "--requests-scale", "0"])


def test_proxima_on_runs_the_proxima_servers_with_proxima_on(model: Path) -> None:
    assert not _pair_cfg(model).proxima_on  # makes the pair's folder
    sw = model.parent / "sw"
    cfg = mx.resolve(
        [
            "--model", str(model),
            "--server-args", "--served-model-name m",
            "--pair", f"sw={sw}",
            "--proxima-on",
            "--out", str(model.parent / "out"),
        ]
    )  # fmt: skip
    assert cfg.proxima_on and cfg.to_dict()["proxima_on"] is True
    assert cfg.server_argv("sw")[:2] == ["--proxima", "on"]
    assert cfg.server_argv("proxima")[:2] == ["--proxima", "on"]
    assert cfg.server_argv("sw-stock")[:2] == ["--proxima", "off"]
