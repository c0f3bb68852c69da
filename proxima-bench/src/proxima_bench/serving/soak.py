"""Overload soak: Poisson arrivals at a fixed rate against one server for a fixed time, sampled.

Per mode (a server started per ``--mode``: ``off`` = ``--proxima off``, ``on`` = the defaults,
or any extra arguments given after ``--``), sends completions with token-id prompts at
``--rate`` requests per second (open loop: arrivals do not wait for answers) for ``--seconds``,
then waits until every request has answered or its client timeout ran out, then until the
server is idle. Every second it samples the server's ``/metrics`` (running, waiting, KV usage,
proxima's held slots), the resident memory of the server's processes (API server, engine core,
workers) and, where ``nvidia-smi`` exists, GPU memory. Writes ``soak.json`` (every request and
sample, and the verdicts) and ``soak.png`` (P99 latency per 10 s window, queue length, memory).

``--concurrent`` starts every mode's server at once and soaks them side by side, each
offered ``--rate`` (the same seeded request stream): one soak's time for all modes, and both
see the same machine. Where servers share a GPU each one's GPU memory is its own processes'
(``nvidia-smi --query-compute-apps``); ``gpu_mib`` stays the device's total.

Verdicts per mode: every request answered 200 (no 5xx, no client timeout); held KV slots back to
0 once idle (proxima modes); host RSS and GPU memory flat after warm-up (the last third's mean
within ``--flat-tolerance`` of the middle third's).

    python -m proxima_bench.serving.soak --model models/tiny-llama --rate 20 --seconds 300 \\
        --out build/soak -- --enforce-eager --dtype float32 --max-model-len 1024 \\
        --kv-cache-memory-bytes 4194304
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from proxima_bench.serving.metrics_scrape import GpuMemoryPoller, scrape
from proxima_bench.serving.server import Server, internal_port_env

VOCAB = 1000


def make_server(model: str, mode: str, extra: list[str], log: Path, index: int = 0) -> Server:
    """The bench's :class:`Server` for one mode, not started (``off`` adds ``--proxima off``);
    ``index`` sets its base for vLLM's internal ports apart from its siblings' (see
    :func:`internal_port_env`)."""
    args = ["--served-model-name", "soak", "--disable-uvicorn-access-log", *extra]
    if mode == "off":
        args += ["--proxima", "off"]
    return Server(model, args, log, env=internal_port_env(index))


def start_server(model: str, mode: str, extra: list[str], log: Path) -> Server:
    """:func:`make_server`, started and healthy."""
    server = make_server(model, mode, extra, log)
    server.start()
    server.wait_healthy(timeout=600)
    return server


def tree_pids(pid: int) -> set[int]:
    """``pid`` and its live descendants, from /proc."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(k) for k in (task / "children").read_text().split())
        except OSError:
            continue
        found.add(p)
    return found


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (MiB), from /proc."""
    total = 0
    for p in tree_pids(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        except (OSError, AttributeError):
            continue
    return total / 1024


async def one_request(
    session: Any, url: str, rng: random.Random, timeout: float, t0: float
) -> dict[str, Any]:
    import aiohttp

    body = {
        "model": "soak",
        "prompt": [rng.randrange(3, VOCAB) for _ in range(rng.randint(16, 400))],
        "max_tokens": rng.randint(16, 256),
        "ignore_eos": True,
        "temperature": 0.8,
    }
    start = time.monotonic()
    try:
        async with session.post(
            f"{url}/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            await resp.read()
            status = str(resp.status)
    except TimeoutError:
        status = "timeout"
    except Exception as e:  # a refused or reset connection
        status = type(e).__name__
    return {"sent": start - t0, "latency": time.monotonic() - start, "status": status}


async def drive(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    url, pid = server.base_url, server.proc.pid if server.proc else -1
    gpu = GpuMemoryPoller()
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    samples: list[dict[str, Any]] = []
    tasks: list[asyncio.Task] = []
    done = asyncio.Event()

    async def sampler() -> None:
        while not done.is_set():
            sample: dict[str, Any] = {"t": time.monotonic() - t0, "rss_mib": tree_rss_mib(pid)}
            sample["gpu_mib"] = gpu.used_mib()
            sample["gpu_mib_server"] = gpu.used_mib_of(tree_pids(pid))
            try:
                sample.update(await asyncio.to_thread(scrape, url))
            except OSError as e:
                sample["scrape_error"] = str(e)
            samples.append(sample)
            await asyncio.sleep(1.0)

    # One connection per request: a kept-alive connection the server closes while idle
    # (uvicorn: after 5 s) races the next request on it and fails it client-side.
    # --max-connections > 0 queues the rest in the client (latency still counts from send).
    connector = aiohttp.TCPConnector(limit=args.max_connections, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        sampling = asyncio.create_task(sampler())
        next_at, sent = 0.0, []
        while next_at < args.seconds:
            await asyncio.sleep(max(0.0, next_at - (time.monotonic() - t0)))
            sent.append(time.monotonic() - t0)
            tasks.append(asyncio.create_task(one_request(session, url, rng, args.timeout, t0)))
            next_at += rng.expovariate(args.rate)
        results = await answers(tasks, sent, args.max_wall - (time.monotonic() - t0))
        idle_deadline = time.monotonic() + 60
        while time.monotonic() < idle_deadline:
            last = samples[-1] if samples else {}
            if not last.get("vllm:num_requests_running") and not last.get(
                "vllm:num_requests_waiting"
            ):
                break
            await asyncio.sleep(1.0)
        await asyncio.sleep(3.0)  # a few idle samples
        done.set()
        await sampling
    return {"requests": results, "samples": samples}


async def answers(
    tasks: list[asyncio.Task], sent: list[float], wait_s: float
) -> list[dict[str, Any]]:
    """Every request's record; with ``wait_s`` > 0 (what is left of ``--max-wall``) those
    still open then are cancelled (the client disconnects) and recorded as ``cut``."""
    if not tasks:
        return []
    finished, pending = await asyncio.wait(tasks, timeout=wait_s if wait_s > 0 else None)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    return [
        task.result() if task in finished else {"sent": at, "latency": None, "status": "cut"}
        for task, at in zip(tasks, sent, strict=True)
    ]


def verdicts(run: dict[str, Any], mode: str, tolerance: float) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for r in run["requests"]:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    samples = run["samples"]
    n = len(samples)

    def mean(key: str, lo: int, hi: int) -> float | None:
        vals = [s[key] for s in samples[lo:hi] if s.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    flat = {}
    # the server's own GPU memory where it can be told apart (servers sharing a GPU)
    gpu_key = "gpu_mib_server" if mean("gpu_mib_server", 0, n) else "gpu_mib"
    for name, key in (("rss_mib", "rss_mib"), ("gpu_mib", gpu_key)):
        mid, last = mean(key, n // 3, 2 * n // 3), mean(key, 2 * n // 3, n)
        flat[name] = (
            None
            if mid is None or last is None
            else {"middle": mid, "last": last, "flat": abs(last - mid) <= tolerance * mid}
        )
    held_end = samples[-1].get("proxima:kv_slots_used") if samples else None
    return {
        "mode": mode,
        "requests": len(run["requests"]),
        "statuses": statuses,
        "all_answered_200": set(statuses) == {"200"},
        "cut_by_max_wall": statuses.get("cut", 0),
        "held_slots_at_end": held_end,
        "no_slot_leaked": mode == "off" or held_end == 0,
        "memory": flat,
        "preemptions": samples[-1].get("vllm:num_preemptions_total") if samples else None,
        "max_waiting": max((s.get("vllm:num_requests_waiting", 0) for s in samples), default=0),
    }


def plot(runs: dict[str, dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for mode, run in runs.items():
        windows: dict[int, list[float]] = {}
        for r in run["requests"]:
            if r["latency"] is not None:  # not cut by --max-wall
                windows.setdefault(int(r["sent"] // 10), []).append(r["latency"])
        xs = sorted(windows)
        p99 = [sorted(windows[x])[max(0, int(0.99 * len(windows[x])) - 1)] for x in xs]
        axes[0].plot([10 * x for x in xs], p99, label=mode)
        ts = [s["t"] for s in run["samples"]]
        axes[1].plot(
            ts, [s.get("vllm:num_requests_waiting", 0) for s in run["samples"]], label=mode
        )
        axes[2].plot(ts, [s["rss_mib"] for s in run["samples"]], label=f"{mode} host RSS")
        gpu_key = next(
            (k for k in ("gpu_mib_server", "gpu_mib") if any(s.get(k) for s in run["samples"])),
            None,
        )
        if gpu_key:
            axes[2].plot(ts, [s.get(gpu_key) or 0 for s in run["samples"]], label=f"{mode} GPU")
    for ax, name in zip(
        axes,
        ("P99 E2E latency (s), 10 s windows by send time", "requests waiting", "memory (MiB)"),
        strict=True,
    ):
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def soak_in_turn(modes: list[str], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """One mode after the other: start its server, soak it, stop it."""
    runs = {}
    for mode in modes:
        print(f"[soak] {mode}: starting the server", flush=True)
        server = start_server(args.model, mode, args.server_args, args.out / f"{mode}.log")
        try:
            print(f"[soak] {mode}: {args.rate} req/s for {args.seconds:.0f} s", flush=True)
            runs[mode] = asyncio.run(drive(server, args))
        finally:
            server.stop()
    return runs


def soak_concurrently(modes: list[str], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every mode's server started at once, then all soaked side by side."""
    servers: dict[str, Server] = {}
    try:
        for index, mode in enumerate(modes):
            log = args.out / f"{mode}.log"
            servers[mode] = make_server(args.model, mode, args.server_args, log, index)
            servers[mode].start()
        print(f"[soak] starting {', '.join(modes)} at once", flush=True)
        for server in servers.values():
            server.wait_healthy(timeout=600)
        each = f"{args.rate} req/s each for {args.seconds:.0f} s"
        print(f"[soak] {', '.join(modes)}: {each}", flush=True)

        async def all_modes() -> list[dict[str, Any]]:
            return await asyncio.gather(*(drive(servers[m], args) for m in modes))

        return dict(zip(modes, asyncio.run(all_modes()), strict=True))
    finally:
        for server in servers.values():
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--modes", default="off,on")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--timeout", type=float, default=600, help="client timeout per request")
    parser.add_argument("--flat-tolerance", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-wall",
        type=float,
        default=0,
        help="seconds from a soak's start after which requests still open are cut (client "
        "disconnect, counted as 'cut': the run is not a pass) so results are always written "
        "inside a time cap (0: wait for all)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=0,
        help="open connections per server at most (0: one per request in flight); the rest "
        "wait in the client, their latency counted from when they were due",
    )
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="start every mode's server at once and soak them side by side, each at --rate",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("server_args", nargs="*", help="after --: arguments for every server")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    modes = args.modes.split(",")
    runs = soak_concurrently(modes, args) if args.concurrent else soak_in_turn(modes, args)
    summary = [verdicts(runs[mode], mode, args.flat_tolerance) for mode in modes]
    for verdict in summary:
        print(f"[soak] {json.dumps(verdict)}", flush=True)
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (args.out / "soak.json").write_text(
        json.dumps({"args": meta, "verdicts": summary, "runs": runs})
    )
    side = ", side by side" if args.concurrent else ""
    title = f"soak: {args.rate} req/s, {args.seconds:.0f} s per mode{side}"
    plot(runs, args.out / "soak.png", title)
    ok = all(v["all_answered_200"] and v["no_slot_leaked"] for v in summary)
    print(f"[soak] {'PASS' if ok else 'FAIL'}: {args.out / 'soak.json'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
