"""A/B serving benchmark through the OpenAI server: ``--proxima off`` vs ``on``.

For each mode (default ``off`` then ``on``) this starts
``python -m vllm.entrypoints.openai.api_server --proxima MODE ...`` on a free
loopback port, waits for ``/health``, runs vLLM's own load generator
(``vllm bench serve``, see :mod:`proxima_bench.serving.vllm_bench`) once per sweep
point (``--concurrency`` values and/or ``--request-rates``) while a background
thread scrapes ``/metrics`` every ``--scrape-interval`` seconds, then stops the
server (SIGINT, SIGTERM, SIGKILL; the whole process group). Ctrl-C, SIGTERM or
an error stop every child process.

Every point gets a workload file with the same lengths and fresh prompt words
(so prefix-cache hits never carry over from one point to the next), and both
modes get identical files. Outputs in ``--out``:

``raw.json``     everything measured (rewritten after every point)
``report.md``    tables per load point, knee comparison (see ``report``)
``*.png``        throughput / P95 latency vs load, KV usage over time
``command.txt``  the exact command; machine info and git commit are in raw.json
``server-MODE.log``, ``bench.log``, ``workloads/``, ``results/`` (vLLM's JSON)

Example (CPU smoke, tiny model)::

    python -m proxima_bench.serving.ab --preset cpu-smoke --out /tmp/ab
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxima_bench.runinfo import git_info, machine_info
from proxima_bench.serving import metrics_scrape as ms
from proxima_bench.serving.interrupts import (
    deferred,
    install_handlers,
    restore_handlers,
    shielded,
)
from proxima_bench.serving.server import Server, ServerError, child_env, fatal_error, tail
from proxima_bench.serving.vllm_bench import BenchError, BenchRunner, bench_argv
from proxima_bench.workloads import (
    WORKLOAD_NAMES,
    WorkloadError,
    length_summary,
    load_tokenizer,
    make_workload,
    read_lengths,
    write_dataset,
)

SCHEMA = "proxima-serve-ab/1"
DEFAULT_CONCURRENCY = "4,8,16,32,64"
CPU_SERVER_ARGS = (
    "--enforce-eager --dtype float32 --max-model-len 1024 --kv-cache-memory-bytes 16777216"
)

DEFAULTS: dict[str, Any] = {
    "modes": "off,on",
    "workload": "baseline",
    "num_prompts": 200,
    "scale": 1.0,
    "server_args": "",
    "seed": 0,
    "scrape_interval": 0.5,
    "server_timeout": 900.0,
    "run_timeout": 3600.0,
    "stop_timeout": 30.0,
    "p95_target": 2.0,
}
PRESETS: dict[str, dict[str, Any]] = {
    # CI smoke: two points, 16 short requests each, in well under a minute of load.
    "cpu-smoke": {
        "model": "models/tiny-llama",
        "server_args": CPU_SERVER_ARGS,
        "concurrency": "1,4",
        "num_prompts": 16,
        "scale": 0.5,
        "env": ["TORCH_COMPILE_DISABLE=1"],
    },
    # A fuller CPU sweep of the tiny model (a few minutes).
    "cpu": {
        "model": "models/tiny-llama",
        "server_args": CPU_SERVER_ARGS,
        "concurrency": "1,2,4,8,16,32",
        "num_prompts": 64,
        "env": ["TORCH_COMPILE_DISABLE=1"],
    },
}


class ABError(RuntimeError):
    """Bad arguments or setup for the A/B run."""


@dataclass(frozen=True)
class Point:
    """One sweep point: a client concurrency cap and / or a request rate."""

    max_concurrency: int | None
    request_rate: float | None

    @property
    def label(self) -> str:
        """``c=4``, ``r=2`` or ``c=4,r=2``."""
        parts = []
        if self.max_concurrency is not None:
            parts.append(f"c={self.max_concurrency}")
        if self.request_rate is not None:
            parts.append(f"r={self.request_rate:g}")
        return ",".join(parts) or "c=inf"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "label": self.label,
            "max_concurrency": self.max_concurrency,
            "request_rate": self.request_rate,
        }


@dataclass(frozen=True)
class Mode:
    """A server configuration: a label, its ``--proxima`` value, extra args."""

    label: str
    proxima: str
    args: tuple[str, ...] = ()


@dataclass
class Config:
    """Resolved settings of one A/B run."""

    model: str
    tokenizer: str
    modes: list[Mode]
    server_args: list[str]
    points: list[Point]
    workload: str
    workload_file: Path | None
    num_prompts: int
    scale: float
    max_total_len: int | None
    seed: int
    fresh_prompts: bool
    bench_args: list[str]
    scrape_interval: float
    server_timeout: float
    run_timeout: float
    stop_timeout: float
    p95_target: float
    out: Path
    env: dict[str, str]
    python: str
    report: bool
    preset: str | None = None
    argv: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "model": self.model,
            "tokenizer": self.tokenizer,
            "modes": [
                {"label": m.label, "proxima": m.proxima, "args": list(m.args)} for m in self.modes
            ],
            "server_args": self.server_args,
            "points": [p.to_dict() for p in self.points],
            "workload": self.workload,
            "workload_file": None if self.workload_file is None else str(self.workload_file),
            "num_prompts": self.num_prompts,
            "scale": self.scale,
            "max_total_len": self.max_total_len,
            "seed": self.seed,
            "fresh_prompts": self.fresh_prompts,
            "bench_args": self.bench_args,
            "scrape_interval_s": self.scrape_interval,
            "p95_target_s": self.p95_target,
            "env": self.env,
            "preset": self.preset,
        }


# --------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="python -m proxima_bench.serving.ab",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", choices=sorted(PRESETS), help="defaults for a known setup")
    p.add_argument("--model", help="local model folder (no network)")
    p.add_argument("--tokenizer", help="local tokenizer folder (default: --model)")
    p.add_argument(
        "--modes",
        help="comma-separated modes in run order (default off,on); a label "
        "'on:NAME' runs --proxima on with its own --mode-args",
    )
    p.add_argument(
        "--server-args",
        action="append",
        help="extra server arguments for every mode (a string)",
    )
    p.add_argument(
        "--mode-args",
        action="append",
        default=[],
        metavar="MODE=ARGS",
        help="extra server arguments for one mode, e.g. on='--proxima-admission conservative'",
    )
    p.add_argument("--concurrency", help=f"--max-concurrency sweep (default {DEFAULT_CONCURRENCY})")
    p.add_argument(
        "--request-rates",
        help="request-rate sweep (req/s); with --concurrency: all pairs",
    )
    p.add_argument("--workload", choices=WORKLOAD_NAMES, help="default baseline")
    p.add_argument(
        "--workload-file",
        type=Path,
        help="use this custom JSONL for every point instead of generating one",
    )
    p.add_argument("--num-prompts", type=int, help="requests per point (default 200)")
    p.add_argument("--scale", type=float, help="workload length multiplier (default 1)")
    p.add_argument(
        "--max-total-len",
        type=int,
        help="cap prompt+output per request (default: the server's --max-model-len)",
    )
    p.add_argument("--seed", type=int, help="workload seed (default 0)")
    p.add_argument(
        "--same-prompts",
        action="store_true",
        help="reuse point 1's prompts at every point (default: fresh words per point)",
    )
    p.add_argument("--bench-args", action="append", help="extra 'vllm bench serve' arguments")
    p.add_argument("--scrape-interval", type=float, help="seconds between /metrics scrapes (0.5)")
    p.add_argument("--server-timeout", type=float, help="seconds to wait for /health (900)")
    p.add_argument("--run-timeout", type=float, help="seconds per sweep point (3600)")
    p.add_argument("--stop-timeout", type=float, help="seconds from SIGINT to SIGTERM (30)")
    p.add_argument("--p95-target", type=float, help="P95 E2E latency target for the knee, s (2)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="child env")
    p.add_argument("--python", default=sys.executable, help="interpreter for server and bench")
    p.add_argument("--out", type=Path, help="output folder (default bench-results/serve-ab-TIME)")
    p.add_argument("--no-report", action="store_true", help="write raw.json only")
    return p


def _split_list(text: str, cast: Callable[[str], Any]) -> list[Any]:
    try:
        return [cast(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as e:
        raise ABError(f"bad list {text!r}: {e}") from e


def _opt_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in an argument list (``--f V`` or ``--f=V``)."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def _max_total_len(model: Path, arg_lists: Sequence[Sequence[str]]) -> int | None:
    lens = [v for args in arg_lists if (v := _opt_value(args, "--max-model-len"))]
    if lens:
        try:
            return min(int(v) for v in lens)
        except ValueError:
            return None
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def resolve(argv: Sequence[str]) -> Config:
    """Parse ``argv`` and apply preset and defaults.

    Raises:
        ABError: inconsistent or missing settings.
    """
    args = build_parser().parse_args(list(argv))
    preset = PRESETS.get(args.preset or "", {})

    def get(name: str) -> Any:
        value = getattr(args, name, None)
        if value is None:
            value = preset.get(name, DEFAULTS.get(name))
        return value

    model_arg = get("model")
    if not model_arg:
        raise ABError("--model is required (a local model folder)")
    model = Path(model_arg).expanduser().resolve()
    if not (model / "config.json").is_file():
        raise ABError(f"--model {model_arg}: no config.json there (local folders only)")
    tokenizer = Path(args.tokenizer).expanduser().resolve() if args.tokenizer else model

    server_args: list[str] = []
    for text in args.server_args or [preset.get("server_args", "")]:
        server_args += shlex.split(text)
    mode_args: dict[str, list[str]] = {}
    for item in args.mode_args:
        label, sep, text = item.partition("=")
        if not sep:
            raise ABError(f"--mode-args {item!r}: expected MODE=ARGS")
        mode_args.setdefault(label.strip(), []).extend(shlex.split(text))
    modes = []
    for label in _split_list(get("modes"), str):
        proxima = label.split(":", 1)[0]
        if proxima not in ("on", "off"):
            raise ABError(f"mode {label!r}: must be 'on', 'off' or 'on:NAME' / 'off:NAME'")
        modes.append(Mode(label, proxima, tuple(mode_args.pop(label, []))))
    if not modes or len({m.label for m in modes}) != len(modes):
        raise ABError("--modes needs distinct labels, e.g. off,on")
    if mode_args:
        raise ABError(f"--mode-args for modes not in --modes: {', '.join(mode_args)}")
    for flag in ("--proxima", "--port", "--host", "--model"):
        for a in server_args + [a for m in modes for a in m.args]:
            if a == flag or a.startswith(flag + "="):
                raise ABError(f"{flag} is set by serve_ab; remove it from the server args")

    concurrency = get("concurrency")
    rates_text = get("request_rates")
    if concurrency is None and rates_text is None:
        concurrency = DEFAULT_CONCURRENCY
    concs: list[int | None] = _split_list(concurrency, int) if concurrency else [None]
    rates: list[float | None] = _split_list(rates_text, float) if rates_text else [None]
    if any(c is not None and c < 1 for c in concs) or any(r is not None and r <= 0 for r in rates):
        raise ABError("concurrency values must be >= 1 and request rates > 0")
    points = [Point(c, r) for c in concs for r in rates]
    if len({p.label for p in points}) != len(points):
        raise ABError("--concurrency / --request-rates list a load twice")

    num_prompts = int(get("num_prompts"))
    if num_prompts < 1:
        raise ABError("--num-prompts must be >= 1")
    workload_file = args.workload_file.resolve() if args.workload_file else None
    if workload_file is not None and not workload_file.is_file():
        raise ABError(f"--workload-file {workload_file} does not exist")
    max_total = args.max_total_len or _max_total_len(model, [server_args, *[m.args for m in modes]])

    env: dict[str, str] = {}
    for item in [*preset.get("env", []), *args.env]:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ABError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value

    out = args.out or Path("bench-results") / dt.datetime.now().strftime("serve-ab-%Y%m%d-%H%M%S")
    bench_args: list[str] = []
    for text in args.bench_args or []:
        bench_args += shlex.split(text)
    return Config(
        model=str(model),
        tokenizer=str(tokenizer),
        modes=modes,
        server_args=server_args,
        points=points,
        workload=get("workload"),
        workload_file=workload_file,
        num_prompts=num_prompts,
        scale=float(get("scale")),
        max_total_len=max_total,
        seed=int(get("seed")),
        fresh_prompts=not args.same_prompts,
        bench_args=bench_args,
        scrape_interval=float(get("scrape_interval")),
        server_timeout=float(get("server_timeout")),
        run_timeout=float(get("run_timeout")),
        stop_timeout=float(get("stop_timeout")),
        p95_target=float(get("p95_target")),
        out=out.resolve(),
        env=env,
        python=args.python,
        report=not args.no_report,
        preset=args.preset,
        argv=list(argv),
    )


# --------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------


class Progress:
    """Timestamped progress lines on stdout."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        """Print one progress line."""
        print(f"[serve-ab {time.monotonic() - self.t0:7.1f}s] {message}", flush=True)


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def prepare_workloads(cfg: Config, log: Progress) -> tuple[list[Path], dict[str, Any]]:
    """Write one workload file per point (same lengths; fresh words unless asked).

    Returns:
        The file per point and the workload record for raw.json.
    """
    if cfg.workload_file is not None:
        record: dict[str, Any] = {"name": "file", "file": str(cfg.workload_file)}
        try:
            lengths = read_lengths(cfg.workload_file)[: cfg.num_prompts]
            record["lengths"] = {
                "prompt": [r.prompt_len for r in lengths],
                "output": [r.output_len for r in lengths],
            }
            record["summary"] = length_summary(lengths)
        except WorkloadError as e:
            record["lengths_error"] = str(e)
        return [cfg.workload_file] * len(cfg.points), record

    workload = make_workload(cfg.workload, cfg.scale, cfg.max_total_len)
    log(
        f"workload {cfg.workload} (scale {cfg.scale:g}, cap {cfg.max_total_len}): loading tokenizer"
    )
    with deferred():  # the tokenizer imports torch: no signal mid-import
        tokenizer = load_tokenizer(cfg.tokenizer)
    folder = cfg.out / "workloads"
    files: list[Path] = []
    written = None
    for i, _point in enumerate(cfg.points):
        if i > 0 and not cfg.fresh_prompts:
            files.append(files[0])
            continue
        written = write_dataset(
            workload,
            cfg.num_prompts,
            tokenizer,
            folder / f"point-{i}.jsonl",
            seed=cfg.seed,
            content_seed=cfg.seed + 1000 * i,
        )
        files.append(written.path)
    assert written is not None
    log(f"wrote {len(set(files))} workload file(s): {json.dumps(written.summary())}")
    record = {
        "name": cfg.workload,
        "params": workload.params(),
        "seed": cfg.seed,
        "fresh_prompts": cfg.fresh_prompts,
        "files": [str(f) for f in files],
        "summary": written.summary(),
        "lengths": {
            "prompt": [r.prompt_len for r in written.requests],
            "output": [r.output_len for r in written.requests],
            "group": [r.group for r in written.requests],
            "prefix": [r.prefix_len for r in written.requests],
        },
    }
    return files, record


_SCALAR_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
)
_LATENCIES = ("ttft", "tpot", "itl", "e2el")


def condense_result(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split vLLM's saved result into scalar metrics and compact per-request data.

    ``generated_texts`` and per-token ``itls`` are dropped; each request's E2E
    latency is kept as ``ttft + sum(itl)`` (as vLLM's own timeline plot does).
    """
    metrics = {k: result.get(k) for k in _SCALAR_KEYS}
    for name in _LATENCIES:
        for stat in ("mean", "median", "std", "p50", "p95", "p99"):
            key = f"{stat}_{name}_ms"
            if key in result:
                metrics[key] = result[key]
    ttfts = result.get("ttfts") or []
    itls = result.get("itls") or []
    errors = result.get("errors") or []
    per_request = {
        "input_lens": result.get("input_lens"),
        "output_lens": result.get("output_lens"),
        "start_times": result.get("start_times"),
        "ttfts": ttfts,
        "e2els": [
            (t + sum(i)) if (t and i is not None) else None
            for t, i in zip(ttfts, itls or [[]] * len(ttfts), strict=True)
        ],
        "errors": {str(n): e[:500] for n, e in enumerate(errors) if e},
    }
    return metrics, per_request


def _run_checks(
    metrics: dict[str, Any],
    per_request: dict[str, Any],
    summary: dict[str, Any],
    file_lengths: dict[str, list[int]] | None,
) -> dict[str, Any]:
    """Token-exactness and completeness checks of one run."""
    checks: dict[str, Any] = {}
    if file_lengths:
        want_prompt = file_lengths["prompt"]
        got = per_request.get("input_lens") or []
        checks["client_prompt_len_mismatches"] = sum(
            1 for a, b in zip(want_prompt, got, strict=False) if a != b
        ) + abs(len(want_prompt) - len(got))
        checks["expected_prompt_tokens"] = sum(want_prompt)
        checks["expected_output_tokens"] = sum(file_lengths["output"])
    checks["server_prompt_tokens"] = summary.get("prompt_tokens")
    checks["server_generation_tokens"] = summary.get("generation_tokens")
    checks["client_output_tokens"] = metrics.get("total_output_tokens")
    return checks


def _file_lengths(path: Path, num: int) -> dict[str, list[int]] | None:
    try:
        reqs = read_lengths(path)[:num]
    except WorkloadError:
        return None
    return {
        "prompt": [r.prompt_len for r in reqs],
        "output": [r.output_len for r in reqs],
    }


def _wait_idle(base_url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            values = ms.scrape(base_url)
        except OSError:
            return
        busy = values.get("vllm:num_requests_running", 0) + values.get(
            "vllm:num_requests_waiting", 0
        )
        if not busy:
            return
        time.sleep(0.5)


def _heartbeat(
    log: Progress, tag: str, every: float = 10.0
) -> Callable[[float, dict[str, float]], None]:
    state = {"next": every}

    def tick(elapsed: float, values: dict[str, float]) -> None:
        if elapsed < state["next"]:
            return
        state["next"] = elapsed + every
        kv = values.get("vllm:kv_cache_usage_perc")
        parts = [
            f"running {values.get('vllm:num_requests_running', 0):.0f}",
            f"waiting {values.get('vllm:num_requests_waiting', 0):.0f}",
            f"KV {kv * 100:.1f}%" if kv is not None else "KV ?",
            f"preemptions {values.get('vllm:num_preemptions_total', 0):.0f}",
        ]
        if ms.GPU_MEMORY in values:
            parts.append(f"GPU mem {values[ms.GPU_MEMORY]:.0f} MiB")
        log(f"  [{tag}] {elapsed:.0f}s: " + ", ".join(parts))

    return tick


def _count(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _point_line(mode: str, run: dict[str, Any]) -> str:
    m = run.get("metrics") or {}
    s = run.get("summary") or {}
    kv = s.get("peak_kv_usage")
    e2e = m.get("p95_e2el_ms")
    return (
        f"[{mode} {run['point']['label']}] done in {run.get('wall_s', 0):.1f}s: "
        f"{m.get('completed')}/{(m.get('completed') or 0) + (m.get('failed') or 0)} ok, "
        f"{m.get('request_throughput') or 0:.2f} req/s, "
        f"{m.get('output_throughput') or 0:.1f} out tok/s, "
        f"P95 E2E {e2e / 1000 if e2e is not None else float('nan'):.2f}s, "
        f"peak KV {kv * 100 if kv is not None else float('nan'):.1f}%, "
        f"preemptions {_count(s.get('preemptions'))}"
    )


def _start_runner(
    cfg: Config,
    runner_box: dict[str, BenchRunner],
    record: dict[str, Any],
    save: Callable[[], None],
) -> BenchRunner:
    """Start the persistent ``vllm bench`` runner.

    It is registered (and its pid saved) before it gets ready, so an
    interrupt during its start-up still stops it.
    """
    runner = BenchRunner(cfg.out / "bench.log", child_env(cfg.env), cfg.python)
    runner_box["runner"] = runner
    record.setdefault("bench_runner_pids", []).append(runner.launch())
    save()
    runner.wait_ready(timeout=cfg.server_timeout)
    return runner


def run_mode(
    cfg: Config,
    mode: Mode,
    files: list[Path],
    runner_box: dict[str, BenchRunner],
    record: dict[str, Any],
    save: Callable[[], None],
    log: Progress,
    gpu: ms.GpuMemoryPoller | None,
) -> None:
    """Start one mode's server, run every point, stop it (always).

    Raises:
        ServerError: the server failed to start or died.
    """
    server_args = ["--proxima", mode.proxima, *cfg.server_args, *mode.args]
    server = Server(
        cfg.model,
        server_args,
        cfg.out / f"server-{mode.label.replace(':', '-')}.log",
        python=cfg.python,
        env=cfg.env,
    )
    record["server"] = {
        "command": server.command,
        "port": server.port,
        "log": server.log_path.name,
    }
    try:
        log(
            f"[{mode.label}] starting server on port {server.port}: "
            + shlex.join(server.command[1:])
        )
        server.start()
        assert server.proc is not None
        record["server"]["pid"] = server.proc.pid
        save()
        if "runner" not in runner_box:  # import vLLM's bench while the server loads
            _start_runner(cfg, runner_box, record, save)
        startup = server.wait_healthy(
            cfg.server_timeout, progress=lambda m: log(f"[{mode.label}] {m}")
        )
        facts = server.log_facts()
        samples = ms.parse_prometheus(ms.fetch_metrics(server.base_url))
        cache_info = ms.info_labels(samples, "vllm:cache_config_info")
        record["server"].update(
            startup_s=round(startup, 2), log_facts=facts, cache_config=cache_info[:1]
        )
        if facts.get("mode") not in (None, mode.proxima):
            raise ServerError(
                f"server reports proxima {facts.get('mode')} but --proxima {mode.proxima} "
                "was asked (is this the proxima-vllm install?)"
            )
        log(
            f"[{mode.label}] server ready in {startup:.1f}s "
            f"(proxima {facts.get('mode', '?')}, "
            f"KV {facts.get('kv_cache_size_tokens', '?')} tokens)"
        )
        save()
        for i, (point, path) in enumerate(zip(cfg.points, files, strict=True)):
            run = run_point(
                cfg,
                mode,
                point,
                path,
                server,
                runner_box,
                log,
                gpu,
                lambda: _start_runner(cfg, runner_box, record, save),
            )
            record["runs"].append(run)
            save()
            if run.get("error"):
                log(f"[{mode.label} {point.label}] FAILED: {run['error'].splitlines()[0]}")
            else:
                log(_point_line(mode.label, run))
            if not (server.alive() and server.healthy()):
                fatal = fatal_error(server.log_path)
                state = "died" if not server.alive() else "is unhealthy (/health fails)"
                raise ServerError(
                    f"server {state} after {point.label}"
                    + (f": {fatal}" if fatal else "")
                    + f"; last lines of {server.log_path}:\n{tail(server.log_path)}"
                )
            if i + 1 < len(cfg.points):
                _wait_idle(server.base_url)
    finally:
        log(f"[{mode.label}] stopping server")
        with shielded(log):
            code = server.stop(cfg.stop_timeout)
        record["server"]["exit_code"] = code
        record["server"]["fatal_error"] = fatal_error(server.log_path)


def run_point(
    cfg: Config,
    mode: Mode,
    point: Point,
    dataset: Path,
    server: Server,
    runner_box: dict[str, BenchRunner],
    log: Progress,
    gpu: ms.GpuMemoryPoller | None,
    restart_runner: Callable[[], object],
) -> dict[str, Any]:
    """One ``vllm bench serve`` run with /metrics scraped around it.

    A benchmark error is recorded in the run (not raised); a dead runner is
    replaced with ``restart_runner`` for the next point.
    """
    tag = f"{mode.label} {point.label}"
    result_dir = cfg.out / "results"
    point_tag = point.label.replace(",", "-").replace("=", "")
    filename = f"{mode.label.replace(':', '-')}-{point_tag}.json"
    argv = bench_argv(
        host=server.host,
        port=server.port,
        model=cfg.model,
        tokenizer=cfg.tokenizer,
        dataset_path=dataset,
        num_prompts=cfg.num_prompts,
        result_dir=result_dir,
        result_filename=filename,
        label=f"proxima-{mode.label}",
        max_concurrency=point.max_concurrency,
        request_rate=point.request_rate,
        seed=cfg.seed,
        extra=cfg.bench_args,
    )
    run: dict[str, Any] = {
        "point": point.to_dict(),
        "workload_file": str(dataset),
        "bench_argv": argv,
        "result_file": str(result_dir / filename),
        "started_at": dt.datetime.now().isoformat(timespec="seconds"),
        "error": None,
    }
    log(f"[{tag}] vllm bench serve: {cfg.num_prompts} requests")
    scraper = ms.MetricsScraper(
        server.base_url, cfg.scrape_interval, gpu, on_tick=_heartbeat(log, tag)
    )
    scraper.scrape_once()  # baseline for counters
    scraper.start()
    t0 = time.monotonic()
    try:
        runner_box["runner"].run(argv, timeout=cfg.run_timeout)
    except BenchError as e:
        run["error"] = str(e)
        dead = runner_box.get("runner")
        if dead is not None and (dead.proc is None or dead.proc.poll() is not None):
            dead.stop()
            del runner_box["runner"]
            restart_runner()
    finally:
        run["wall_s"] = round(time.monotonic() - t0, 3)
        series = scraper.stop()
    run["metrics_series"] = series.to_dict()
    run["summary"] = ms.summarize(series)
    if run["error"] is None:
        try:
            result = json.loads((result_dir / filename).read_text())
        except (OSError, ValueError) as e:
            run["error"] = f"cannot read vLLM's result {result_dir / filename}: {e}"
        else:
            run["metrics"], run["per_request"] = condense_result(result)
            run["checks"] = _run_checks(
                run["metrics"],
                run["per_request"],
                run["summary"],
                _file_lengths(dataset, cfg.num_prompts),
            )
    return run


def run_ab(cfg: Config, log: Progress | None = None) -> tuple[dict[str, Any], int]:
    """Run the whole A/B; returns (raw record, exit status).

    The raw record is also written to ``cfg.out / "raw.json"`` after every
    point, so an interrupted run keeps what it measured.
    """
    log = log or Progress()
    cfg.out.mkdir(parents=True, exist_ok=True)
    command = [cfg.python, "-m", "proxima_bench.serving.ab", *cfg.argv]
    (cfg.out / "command.txt").write_text(
        f"# cwd: {os.getcwd()}\n{shlex.join(command)}\n", encoding="utf-8"
    )
    here = Path(__file__).resolve()
    gpu = ms.GpuMemoryPoller()
    raw: dict[str, Any] = {
        "schema": SCHEMA,
        "created": dt.datetime.now().isoformat(timespec="seconds"),
        "command": command,
        "cwd": os.getcwd(),
        "git": git_info(Path.cwd(), here),
        "machine": machine_info(),
        "config": cfg.to_dict(),
        "workload": None,
        "modes": {},
        "status": "running",
    }
    raw_path = cfg.out / "raw.json"

    def save() -> None:
        _atomic_json(raw_path, raw)

    log(f"output: {cfg.out}")
    log(
        f"modes {', '.join(m.label for m in cfg.modes)}; points "
        f"{', '.join(p.label for p in cfg.points)}; {cfg.num_prompts} requests each"
    )
    runner_box: dict[str, BenchRunner] = {}
    status = 0
    previous = install_handlers()
    try:
        files, raw["workload"] = prepare_workloads(cfg, log)
        save()
        gpu_poller = gpu if gpu.available() else None
        for mode in cfg.modes:
            record: dict[str, Any] = {
                "label": mode.label,
                "proxima": mode.proxima,
                "runs": [],
                "error": None,
            }
            raw["modes"][mode.label] = record
            try:
                run_mode(cfg, mode, files, runner_box, record, save, log, gpu_poller)
            except (ServerError, BenchError, OSError) as e:
                record["error"] = str(e)
                status = 1
                log(f"[{mode.label}] ERROR: {e}")
            if any(r.get("error") for r in record["runs"]):
                status = 1
            save()
        raw["status"] = "done" if status == 0 else "errors"
    except KeyboardInterrupt as e:
        raw["status"] = "interrupted"
        status = 130
        log(f"interrupted ({e or 'Ctrl-C'}): stopping everything")
    except (WorkloadError, ABError) as e:
        raw["status"] = "errors"
        raw["error"] = str(e)
        status = 2
        log(f"ERROR: {e}")
    finally:
        runner = runner_box.pop("runner", None)
        if runner is not None:
            with shielded(log):
                runner.stop()
        restore_handlers(previous)
        save()
    if cfg.report and any(m["runs"] for m in raw["modes"].values()):
        from proxima_bench.serving.report import write_report

        try:
            report_path = write_report(raw, cfg.out, cfg.p95_target)
            log(f"report: {report_path}")
        except Exception as e:  # noqa: BLE001 - keep raw.json even if plotting fails
            log(f"report failed: {type(e).__name__}: {e}")
            status = status or 1
    log(f"raw data: {raw_path}")
    return raw, status


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = resolve(argv)
    except ABError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _raw, status = run_ab(cfg)
    return status


if __name__ == "__main__":
    sys.exit(main())
