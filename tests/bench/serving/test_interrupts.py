"""Signal sections of the bench runners: shielded clean-up, deferred imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxima_bench.serving import interrupts
from proxima_bench.serving.interrupts import Interrupted, deferred, shielded

REPO = Path(__file__).resolve().parents[3]


def _deliver(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


@pytest.fixture
def runner_handlers():  # type: ignore[no-untyped-def]
    previous = interrupts.install_handlers()
    try:
        yield
    finally:
        interrupts.restore_handlers(previous)


def test_shielded_holds_off_signals_during_cleanup() -> None:
    notes: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    with shielded(notes.append):
        _deliver(signal.SIGTERM)
    assert notes and "SIGTERM ignored" in notes[0]
    assert signal.getsignal(signal.SIGTERM) == before


def test_install_handlers_turns_sigterm_into_interrupted(runner_handlers: None) -> None:
    with pytest.raises(Interrupted, match="SIGTERM"):
        _deliver(signal.SIGTERM)


def test_deferred_holds_sigterm_until_the_section_ends(runner_handlers: None) -> None:
    reached: list[str] = []
    with pytest.raises(Interrupted, match="SIGTERM"), deferred():
        _deliver(signal.SIGTERM)
        reached.append("after the signal")  # not cut short inside
        _deliver(signal.SIGHUP)  # a second one is dropped: the first wins
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL


def test_deferred_sigint_becomes_keyboard_interrupt_at_the_end() -> None:
    # Python's own handler, whatever this process inherited (started in the background by a
    # non-interactive shell, it inherits SIGINT ignored, and an ignored SIGINT stays ignored)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = False
        with pytest.raises(KeyboardInterrupt) as info, deferred():
            _deliver(signal.SIGINT)
            reached = True
        assert reached and not isinstance(info.value, Interrupted)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_deferred_without_a_signal_is_transparent(runner_handlers: None) -> None:
    before = {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS}
    with deferred():
        value = sum(range(10))
    assert value == 45
    assert {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS} == before


def test_deferred_keeps_the_sections_own_error(runner_handlers: None) -> None:
    with pytest.raises(ValueError, match="own"), deferred():
        raise ValueError("own")


def test_deferred_sigterm_with_default_handler_still_terminates() -> None:
    """With no runner handler, the held SIGTERM ends the process as it would have."""
    code = (
        "import os, signal, time\n"
        "from proxima_bench.serving.interrupts import deferred\n"
        "with deferred():\n"
        "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.1)\n"
        "    print('inside', flush=True)\n"
        "print('not reached', flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == -signal.SIGTERM
    assert proc.stdout == "inside\n"


def test_deferred_is_a_no_op_off_the_main_thread() -> None:
    import threading

    seen: list[object] = []

    def body() -> None:
        with deferred():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert seen == [before]
