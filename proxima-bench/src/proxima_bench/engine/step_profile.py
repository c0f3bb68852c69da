"""Per-step profile of a decode step: stock and proxima, batch by batch (issue 13, item 2).

One process per engine (``--mode stock | proxima``), the engine core in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so its parts can be timed, vLLM's defaults
otherwise (async scheduling, CUDA graphs). For each batch size ``B`` of ``--batches``
the profile submits ``B`` requests at once (distinct random token-id prompts of
``--prompt-len``, ``--output-len`` tokens each, ignore_eos), steps the engine until
they finish, and keeps the steady decode: the model steps that ran exactly ``B``
requests of one token each. Over that window it reports, per model step:

- ``step_ms``: wall time (window length / model steps): what the server's decode rate sees;
- CPU on the engine-core thread: ``schedule_ms`` (``Scheduler.schedule``, of which
  ``kv_alloc_ms`` is the KV manager's ``allocate_slots``), ``update_ms``
  (``Scheduler.update_from_output``), ``execute_ms`` (the model runner's
  ``execute_model``: input preparation and kernel launches, of which ``prepare_ms``
  is ``prepare_inputs``), ``sample_ms`` (``sample_tokens``);
- GPU (CUDA events, none on CPU): ``gpu_ms`` from ``execute_model``'s entry to
  ``sample_tokens``' exit on the model's stream, ``gpu_idle_ms`` = ``step_ms - gpu_ms``
  (time the GPU waited for the host between steps) and ``fits``: whether the
  host work of a step hides under the GPU's (``gpu_idle_ms`` under 5 % of a step);
- the GPU's SM clock over the window (NVML, sampled every 10 ms from a thread):
  ``sm_clock_mhz_mean``, ``sm_clock_mhz_min`` and ``power_capped``, the share of samples
  the driver held the clock down for power (on an H100 at its 700 W cap the clock dipped
  to 1,425 MHz inside one-second windows, enough to move ``gpu_ms`` by several per cent
  between runs of the same kernels).

- the process's own host speed, the engine idle: ``probe_ms`` and ``probe_after_ms``
  (:func:`host_probe`, the median of a fixed pure-Python workload, timed right before the
  batch is submitted and right after it drains; the report shows their mean). The
  same upstream code (``prepare``, ``sample``) ran 1.5-2x slower in one process than in the
  next on the same card; the probe says whether a process is slow at everything (the
  machine) or only inside the step (the mode's own work).

With async scheduling the host prepares step ``n + 1`` while the GPU runs step ``n``,
so host time that fits under ``gpu_ms`` costs nothing; ``gpu_idle_ms`` is what does
not fit. One JSON line per batch size goes to ``--out``.

NOTE: the timers wrap private methods of the engine core's scheduler, KV manager and
model runner (``# private:``); they only time, never change, what those do. The
same wrappers run on stock and proxima.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTS = ("schedule", "kv_alloc", "update", "execute", "prepare", "sample")


@dataclass(slots=True)
class Recorder:
    """Host timings of the wrapped calls and CUDA events per model step."""

    spans: list[tuple[str, float, float]] = field(default_factory=list)
    # per model step: (host time at execute_model entry, scheduled requests, scheduled
    # tokens, start event, end event); events are None without CUDA
    steps: list[list[Any]] = field(default_factory=list)
    cuda: bool = False
    # (host time, SM clock MHz, held down for power) samples; see ClockSampler
    clocks: list[tuple[float, int, bool]] = field(default_factory=list)

    def wrap(self, obj: Any, name: str, part: str) -> bool:
        """Time ``obj.name`` under ``part``; False where the object has no such method."""
        original = getattr(obj, name, None)
        if original is None:
            return False

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            result = original(*args, **kwargs)
            self.spans.append((part, t, time.perf_counter()))
            return result

        setattr(obj, name, timed)
        return True

    def event(self) -> Any:
        if not self.cuda:
            return None
        import torch

        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e


# nvmlClocksThrottleReasonSwPowerCap | nvmlClocksThrottleReasonHwPowerBrakeSlowdown
POWER_REASONS = 0x4 | 0x80


class ClockSampler:
    """Samples the GPU's SM clock into ``rec.clocks`` every ``interval`` s from a daemon
    thread while started. ``read`` returns (MHz, held down for power); :meth:`nvml` makes
    one for the device this process runs on, or None where NVML is missing."""

    def __init__(
        self, rec: Recorder, read: Callable[[], tuple[int, bool]], interval: float = 0.01
    ) -> None:
        self.rec, self.read, self.interval = rec, read, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def nvml(rec: Recorder, interval: float = 0.01) -> ClockSampler | None:
        try:
            from vllm.third_party import pynvml  # vLLM's vendored copy of nvidia-ml-py

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
            handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(visible))
                if visible.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(visible)
            )
        except Exception:  # noqa: BLE001 - no NVML, no clock: the profile runs without it
            return None

        # "event reasons" is the newer drivers' name for "throttle reasons"
        reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

        def read() -> tuple[int, bool]:
            mhz = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            try:
                reasons = int(reasons_of(handle)) if reasons_of else 0
            except Exception:  # noqa: BLE001 - the clock alone is still worth having
                reasons = 0
            return mhz, bool(reasons & POWER_REASONS)

        return ClockSampler(rec, read, interval)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                mhz, capped = self.read()
            except Exception:  # noqa: BLE001 - one failed read is one missing sample
                continue
            self.rec.clocks.append((time.perf_counter(), mhz, capped))

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="clock-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def host_probe(rounds: int = 7) -> float:
    """Milliseconds one fixed pure-Python workload takes in this process (the median of
    ``rounds``): list, dict and sort work of the kind a scheduler step does, no I/O, no GPU.
    Two processes' probes compare their host speed on identical code."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        rows = [(i * 7919 % 1009, i, str(i)) for i in range(20_000)]
        index = {r[2]: r for r in rows}
        rows.sort()
        total = sum(index[r[2]][0] for r in rows[::3])
        times.append(time.perf_counter() - t)
        if total < 0:  # never: keeps the work from looking unused
            raise AssertionError(total)
    times.sort()
    return round(times[len(times) // 2] * 1e3, 4)


def instrument(core: Any, rec: Recorder) -> dict[str, bool]:
    """Wrap the engine core's scheduler, KV manager and model runner (one process)."""
    sched = core.scheduler
    runner = core.model_executor.driver_worker.worker.model_runner  # private: uniproc executor
    wrapped = {
        "schedule": rec.wrap(sched, "schedule", "schedule"),
        "update": rec.wrap(sched, "update_from_output", "update"),
        "kv_alloc": rec.wrap(sched.kv_cache_manager, "allocate_slots", "kv_alloc"),
        # Model Runner V2 (GPU default for Llama-like models) and V1 (CPU, others)
        "prepare": rec.wrap(runner, "prepare_inputs", "prepare")
        or rec.wrap(runner, "_prepare_inputs", "prepare"),
    }
    original_execute = runner.execute_model
    original_sample = runner.sample_tokens

    def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        start = rec.event()
        result = original_execute(scheduler_output, *args, **kwargs)
        rec.spans.append(("execute", t, time.perf_counter()))
        counts = scheduler_output.num_scheduled_tokens
        rec.steps.append([t, len(counts), scheduler_output.total_num_scheduled_tokens, start, None])
        return result

    def sample_tokens(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        result = original_sample(*args, **kwargs)
        if rec.steps and rec.steps[-1][4] is None:
            rec.steps[-1][4] = rec.event()
        rec.spans.append(("sample", t, time.perf_counter()))
        return result

    runner.execute_model = execute_model
    runner.sample_tokens = sample_tokens
    wrapped.update(execute=True, sample=True)
    return wrapped


def window(steps: list[list[Any]], batch: int) -> tuple[int, int] | None:
    """The longest run of consecutive model steps of ``batch`` requests, one token each."""
    best: tuple[int, int] | None = None
    i = 0
    while i < len(steps):
        if steps[i][1] == batch and steps[i][2] == batch:
            j = i
            while j + 1 < len(steps) and steps[j + 1][1] == batch and steps[j + 1][2] == batch:
                j += 1
            if best is None or j - i > best[1] - best[0]:
                best = (i, j)
            i = j + 1
        else:
            i += 1
    return best


def summarize(rec: Recorder, batch: int, trim: int = 2) -> dict[str, Any] | None:
    """Per-step figures over the steady decode at ``batch`` (first/last ``trim`` steps dropped)."""
    span = window(rec.steps, batch)
    if span is None or span[1] - span[0] < 2 * trim + 2:
        return None
    lo, hi = span[0] + trim, span[1] - trim
    t0, t1 = rec.steps[lo][0], rec.steps[hi][0]
    n = hi - lo  # model steps between the first and the last measured step's start
    row: dict[str, Any] = {"batch": batch, "steps": n, "step_ms": round((t1 - t0) / n * 1e3, 4)}
    for part in PARTS:
        total = sum(e - s for p, s, e in rec.spans if p == part and t0 <= s < t1)
        row[f"{part}_ms"] = round(total / n * 1e3, 4)
    host = row["schedule_ms"] + row["update_ms"] + row["execute_ms"] + row["sample_ms"]
    row["host_ms"] = round(host, 4)
    clocks = [(mhz, capped) for t, mhz, capped in rec.clocks if t0 <= t < t1]
    if clocks:
        row["sm_clock_mhz_mean"] = round(sum(c[0] for c in clocks) / len(clocks), 1)
        row["sm_clock_mhz_min"] = min(c[0] for c in clocks)
        row["power_capped"] = round(sum(c[1] for c in clocks) / len(clocks), 3)
        row["clock_samples"] = len(clocks)
    if rec.cuda:
        import torch

        torch.cuda.synchronize()
        gpu = [s[3].elapsed_time(s[4]) for s in rec.steps[lo:hi] if s[3] is not None and s[4]]
        row["gpu_ms"] = round(sum(gpu) / len(gpu), 4)
        row["gpu_idle_ms"] = round(row["step_ms"] - row["gpu_ms"], 4)
        row["fits"] = row["gpu_idle_ms"] < 0.05 * row["step_ms"]
    return row


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=["stock", "proxima"])
    p.add_argument("--model", required=True)
    p.add_argument("--batches", default="1,32,128,512")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=96)
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--kv-bytes", type=int, default=16 * 1024**3)
    p.add_argument("--prefix-caching", choices=["on", "off"], default="on")
    p.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="prompt token ids are drawn below this (default: the model's vocab_size)",
    )
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON lines, appended")
    p.add_argument("--tag", default="")
    p.add_argument(
        "--no-clock", action="store_true", help="do not sample the GPU's SM clock (NVML)"
    )
    return p.parse_args(argv)


def build(a: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    import torch
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    kw: dict[str, Any] = dict(
        model=a.model,
        skip_tokenizer_init=True,
        load_format=a.load_format,
        dtype="bfloat16",
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        enable_prefix_caching=a.prefix_caching == "on",
        kv_cache_memory_bytes=a.kv_bytes,
        seed=a.seed,
        enforce_eager=a.enforce_eager,
        additional_config={"proxima": {"mode": "on" if a.mode == "proxima" else "off"}},
    )
    t = time.perf_counter()
    engine = LLMEngine.from_engine_args(EngineArgs(**kw))
    cfg = engine.vllm_config
    info = {
        "init_s": round(time.perf_counter() - t, 2),
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "block_size": cfg.cache_config.block_size,
        "async_scheduling": cfg.scheduler_config.async_scheduling,
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
        "cudagraph_mode": str(cfg.compilation_config.cudagraph_mode),
        "model_runner": "v2" if getattr(cfg, "use_v2_model_runner", False) else "v1",
    }
    return engine, info


def model_vocab(model: str) -> int:
    """The model's ``vocab_size`` (config.json): prompt ids must stay below it (a shape model
    made with the tiny tokenizer has 1,024; ids beyond index out of the embedding)."""
    config = json.loads((Path(model) / "config.json").read_text())
    vocab = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if not vocab:
        raise SystemExit(f"{model}/config.json names no vocab_size: pass --vocab")
    return int(vocab)


def run_batch(engine: Any, a: argparse.Namespace, batch: int, rng: random.Random, tag: str) -> None:
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=a.output_len, ignore_eos=True, detokenize=False
    )
    for i in range(batch):
        prompt = [rng.randrange(1, a.vocab) for _ in range(a.prompt_len)]
        engine.add_request(f"{tag}-{i}", {"prompt_token_ids": prompt}, params)
    while engine.has_unfinished_requests():
        engine.step()


def report(rows: list[dict[str, Any]]) -> str:
    """A markdown table: stock and proxima side by side per prefix-caching setting and batch,
    each run (``tag``) on its own line; the ratio is to the stock row of the same run."""
    cols = ["step_ms", "gpu_ms", "gpu_idle_ms", "schedule_ms", "kv_alloc_ms", "update_ms",
            "execute_ms", "prepare_ms", "sample_ms"]  # fmt: skip
    keyed = {(r["prefix_caching"], r["batch"], r.get("tag", ""), r["mode"]): r for r in rows}
    lines = [
        "| prefix caching | batch | mode | run | "
        + " | ".join(c.removesuffix("_ms") for c in cols)
        + " | host work hidden | proxima / stock step | host probe ms (proxima / stock)"
        + " | SM clock MHz mean (min), power-capped |",
        "|---|---:|---|---|" + "---:|" * len(cols) + "---|---:|---:|---|",
    ]
    points = sorted({k[:3] for k in keyed}, key=lambda k: (k[0] != "off", k[1], k[2]))
    for pc, batch, tag in points:
        stock = keyed.get((pc, batch, tag, "stock"))
        for mode in ("stock", "proxima"):
            r = keyed.get((pc, batch, tag, mode))
            if r is None:
                continue
            cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float | int) else "–" for c in cols]
            fits = "–" if r.get("fits") is None else ("yes" if r["fits"] else "**no**")
            ratio = f"{r['step_ms'] / stock['step_ms']:.3f}" if mode == "proxima" and stock else ""
            clock = (
                f"{r['sm_clock_mhz_mean']:.0f} ({r['sm_clock_mhz_min']}), {r['power_capped']:.0%}"
                if "sm_clock_mhz_mean" in r
                else "–"
            )
            probe = _probe(r, stock)
            row = " | ".join([pc, str(batch), mode, tag, *cells, fits, ratio, probe, clock])
            lines.append(f"| {row} |")
    return (
        "\n".join(lines)
        + "\n\nAll figures are ms per model step over the steady decode; the host probe is"
        " ms of a fixed pure-Python workload in the same process, the engine idle (a"
        " proxima / stock probe over 1 means proxima's process ran slower at everything).\n"
    )


def _probe_mean(row: dict[str, Any] | None) -> float | None:
    """The mean of the probes taken before and after the row's batch (before alone in rows
    from before the second probe)."""
    if row is None:
        return None
    values = [row.get(k) for k in ("probe_ms", "probe_after_ms")]
    probes = [float(v) for v in values if isinstance(v, float | int)]
    return sum(probes) / len(probes) if probes else None


def _probe(row: dict[str, Any], stock: dict[str, Any] | None) -> str:
    """The row's host probe (the mean of before and after), with proxima's over stock's of
    the same run."""
    probe, base = _probe_mean(row), _probe_mean(stock)
    if probe is None:
        return "–"
    cell = f"{probe:.2f}"
    if row.get("mode") == "proxima" and base:
        cell += f" ({probe / base:.2f})"
    return cell


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        rows = [json.loads(x) for f in argv[1:] for x in Path(f).read_text().splitlines() if x]
        print(report(rows), end="")
        return
    a = parse(argv)
    # The engine core in this process, so its parts can be timed. Set here, not at import:
    # an import (a test's) must not change the environment of everything after it.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if a.vocab is None:
        a.vocab = model_vocab(a.model)
    import torch

    engine, info = build(a)
    core = engine.engine_core.engine_core  # private: the in-process engine core
    rec = Recorder(cuda=torch.cuda.is_available())
    info["wrapped"] = instrument(core, rec)
    sampler = None if a.no_clock or not rec.cuda else ClockSampler.nvml(rec)
    info["clock_sampled"] = sampler is not None
    info["scheduler_cls"] = type(core.scheduler).__name__
    print("ENGINE", json.dumps(info), flush=True)
    rng = random.Random(a.seed)
    run_batch(engine, a, min(8, a.max_num_seqs), rng, "warm")  # not measured
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for batch in [int(b) for b in a.batches.split(",") if b]:
        if batch > a.max_num_seqs:
            print(f"SKIPPED batch {batch}: over --max-num-seqs {a.max_num_seqs}", flush=True)
            continue
        rec.spans.clear()
        rec.steps.clear()
        rec.clocks.clear()
        probe = host_probe()  # the engine idle: the process's host speed, not the mode's
        t = time.perf_counter()
        if sampler is not None:
            sampler.start()
        try:
            run_batch(engine, a, batch, rng, f"b{batch}")
        finally:
            if sampler is not None:
                sampler.stop()
        probe_after = host_probe()  # the host can slow down mid-run: bracket the window
        row = summarize(rec, batch)
        if row is None:
            print(f"SKIPPED batch {batch}: no steady decode window", flush=True)
            continue
        row.update(
            mode=a.mode,
            prefix_caching=a.prefix_caching,
            prompt_len=a.prompt_len,
            output_len=a.output_len,
            max_num_seqs=a.max_num_seqs,
            run_s=round(time.perf_counter() - t, 2),
            probe_ms=probe,
            probe_after_ms=probe_after,
            tag=a.tag,
            engine=info,
        )
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print("RESULT", json.dumps({k: v for k, v in row.items() if k != "engine"}), flush=True)


if __name__ == "__main__":
    main()
