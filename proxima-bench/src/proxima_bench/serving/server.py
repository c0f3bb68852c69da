"""One OpenAI API server process: start on a free loopback port, wait, stop.

The server runs in its own session (process group), so a Ctrl-C in the
terminal reaches only the benchmark driver, which then stops the server in
order: SIGINT to the group, SIGTERM after ``stop_timeout``, SIGKILL after that,
and a final SIGKILL sweep of the group (vLLM's engine-core and worker
processes live in it). On Linux the server also gets SIGTERM if the driver
dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_LINES = 40

# Network access is for loopback only: the model is a local folder.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
}


class ServerError(RuntimeError):
    """The server died, timed out, or could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if unreadable)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


_FATAL = re.compile(r"\] ([A-Z]\w*(?:Error|Exception)(?:: .*)?)$")


def fatal_error(path: Path) -> str | None:
    """The first exception a vLLM log reports (``ValueError: ...``), or None.

    Matches vLLM's logged tracebacks, whose last line is ``... [file:line]
    SomeError: message``; follow-on ``EngineDeadError``s are skipped.
    """
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = _FATAL.search(line.rstrip())
        if m and not m.group(1).startswith(("EngineDeadError", "CancelledError")):
            return m.group(1)[:500]
    return None


# vLLM picks its internal ports (torch.distributed's rendezvous, ZMQ) by binding port 0 and
# releasing it; servers starting at the same moment can pick the same one and one of them dies
# with EADDRINUSE (seen on an H100: h100-matrix-reserve-2026-12-06). With ``VLLM_PORT`` set,
# vLLM scans upward from it instead, so sibling servers get bases this far apart.
INTERNAL_PORT_BASE = 21000
INTERNAL_PORT_STRIDE = 100


def internal_port_env(index: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` plus ``VLLM_PORT`` for the ``index``-th of several sibling servers.

    Left alone where the caller (``env``) or our own environment already sets ``VLLM_PORT``.
    """
    out = dict(env or {})
    if "VLLM_PORT" not in out and "VLLM_PORT" not in os.environ:
        out["VLLM_PORT"] = str(INTERNAL_PORT_BASE + INTERNAL_PORT_STRIDE * index)
    return out


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for child processes: ours plus offline defaults.

    The caller's environment (``PYTHONPATH`` and the like) is inherited;
    :data:`OFFLINE_ENV` values are only defaults.
    """
    env = dict(os.environ)
    for key, value in OFFLINE_ENV.items():
        env.setdefault(key, value)
    env.update(extra or {})
    return env


def child_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGTERM the child if we die, and giving the
    child SIGINT's default action.

    The stop sends SIGINT first (a clean shutdown). A parent started in the background by
    a non-interactive shell has SIGINT ignored, and an ignored signal stays ignored across
    ``exec``: the server would sit out the SIGINT and be SIGTERMed instead.
    ``prctl`` and ``signal`` are looked up here, in the parent, so the child (between fork
    and exec, possibly with other threads' locks held) only makes the two libc calls.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, c_signal = libc.prctl, libc.signal
    except (OSError, AttributeError):
        return None
    c_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    c_signal.restype = ctypes.c_void_p
    sigterm, sigint = int(signal.SIGTERM), int(signal.SIGINT)

    def hook() -> None:
        prctl(1, sigterm)  # PR_SET_PDEATHSIG
        c_signal(sigint, None)  # SIG_DFL

    return hook


def group_alive(pgid: int) -> bool:
    """Whether a process group still has a live (non-zombie) member.

    Reads ``/proc`` where it exists, since orphaned zombies wait for init to
    reap them and still answer ``killpg(pgid, 0)``.
    """
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces or ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_group(
    proc: subprocess.Popen[Any],
    first: signal.Signals = signal.SIGINT,
    timeout: float = 30.0,
    kill_timeout: float = 10.0,
) -> int | None:
    """Stop a process started with ``start_new_session=True`` and its group.

    Sends ``first`` to the group, then SIGTERM after ``timeout`` seconds, then
    SIGKILL after ``kill_timeout`` more; finally SIGKILLs whatever is left in
    the group. Returns the leader's exit status (None if it never exited).
    """
    pgid = proc.pid  # leader of its own session / group

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    if proc.poll() is None:
        for sig, wait_s in (
            (first, timeout),
            (signal.SIGTERM, kill_timeout),
            (signal.SIGKILL, kill_timeout),
        ):
            send(sig)
            try:
                proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
    # Children (engine core, workers) may outlive the leader briefly.
    deadline = time.monotonic() + kill_timeout
    while group_alive(pgid):
        if time.monotonic() > deadline:
            send(signal.SIGKILL)
            break
        time.sleep(0.2)
    return proc.returncode


class Server:
    """An OpenAI-compatible vLLM server subprocess.

    Args:
        model: local model folder.
        args: extra server arguments (``--proxima on`` etc.).
        log_path: where the server's stdout+stderr go.
        host: bind address (loopback).
        port: TCP port; 0 picks a free one.
        python: interpreter to run the server with.
        env: extra environment variables.
    """

    def __init__(
        self,
        model: str,
        args: Sequence[str],
        log_path: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.command = [
            python,
            "-m",
            SERVER_MODULE,
            "--model",
            model,
            "--host",
            host,
            "--port",
            str(self.port),
            *args,
        ]
        self.env = child_env(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Launch the process (returns at once; see :meth:`wait_healthy`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
            preexec_fn=child_hook(),  # noqa: PLW1509 - only calls prctl and signal
        )

    def healthy(self) -> bool:
        """Whether ``GET /health`` answers 200 now."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def wait_healthy(
        self,
        timeout: float = 600.0,
        progress: Callable[[str], None] | None = None,
        every: float = 10.0,
    ) -> float:
        """Poll ``/health`` until it answers; returns the startup seconds.

        Raises:
            ServerError: the process exited, or ``timeout`` passed; the message
                carries the last lines of the server log.
        """
        if self.proc is None:
            raise ServerError("server not started")
        deadline = self._t0 + timeout
        next_note = time.monotonic() + every
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(
                    f"server exited with status {code} before /health answered "
                    f"(command: {' '.join(self.command)}); last lines of "
                    f"{self.log_path}:\n{tail(self.log_path)}"
                )
            if self.healthy():
                self.startup_s = time.monotonic() - self._t0
                return self.startup_s
            now = time.monotonic()
            if now > deadline:
                raise ServerError(
                    f"server did not answer /health within {timeout:.0f} s; last "
                    f"lines of {self.log_path}:\n{tail(self.log_path)}"
                )
            if progress is not None and now >= next_note:
                progress(f"waiting for /health ({now - self._t0:.0f} s)")
                next_note = now + every
            time.sleep(0.5)

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGINT, then SIGTERM / SIGKILL; the whole process group. Idempotent."""
        code = None
        if self.proc is not None:
            code = kill_group(self.proc, signal.SIGINT, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_facts(self) -> dict[str, Any]:
        """Facts the server log states: proxima mode line, KV cache size."""
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except OSError:
            return {}
        facts: dict[str, Any] = {}
        m = re.search(r"proxima-vllm (\S+) on vLLM (\S+): proxima (on|off)", text)
        if m:
            facts.update(proxima_version=m.group(1), vllm_version=m.group(2), mode=m.group(3))
        m = re.search(r"\(admission=(\w+)\)", text)
        if m:
            facts["admission"] = m.group(1)
        m = re.search(r"KV cache size: ([\d,]+) tokens", text)
        if m:
            facts["kv_cache_size_tokens"] = int(m.group(1).replace(",", ""))
        return facts
