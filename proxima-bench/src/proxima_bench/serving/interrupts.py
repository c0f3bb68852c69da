"""Ctrl-C, SIGTERM and SIGHUP for the bench runners (``ab``, ``matrix``).

A runner turns SIGTERM / SIGHUP into :class:`Interrupted` (a
``KeyboardInterrupt``), so one ``except KeyboardInterrupt`` stops every child
and keeps what was measured. Two sections change that:

* :func:`shielded` ignores the signals while children are being stopped
  (a second Ctrl-C would leave a server running);
* :func:`deferred` holds the signal back until the section ends. Python runs
  a signal handler between bytecodes, and an exception raised from one in the
  middle of a native import (torch, pulled in by ``transformers``) can unwind
  through C++ that cannot take it: the process aborts (SIGABRT) without its
  clean-up, and the servers it started are orphaned. The import is short, so
  the runner waits for it and then stops as asked.

Only the main thread can set handlers; elsewhere both sections do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGTERM / SIGHUP, handled like Ctrl-C."""


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signal.Signals(signum).name}")


def install_handlers() -> dict[signal.Signals, Any]:
    """SIGTERM / SIGHUP raise :class:`Interrupted`; returns the handlers replaced."""
    return {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGHUP)}


def restore_handlers(previous: dict[signal.Signals, Any]) -> None:
    """Put back what :func:`install_handlers` (or a section) replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def shielded(log: Callable[[str], None]) -> Iterator[None]:
    """Ignore Ctrl-C / SIGTERM / SIGHUP while children are being stopped.

    Clean-up is bounded (SIGKILL after the stop timeouts), so nothing waits
    forever on the signals ignored here.
    """
    if not _in_main_thread():
        yield
        return

    def note(signum: int, _frame: FrameType | None) -> None:
        log(f"{signal.Signals(signum).name} ignored: still stopping child processes")

    previous = {sig: signal.signal(sig, note) for sig in SIGNALS}
    try:
        yield
    finally:
        restore_handlers(previous)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C / SIGTERM / SIGHUP until the section ends, then act on the first.

    The first signal received inside is delivered at the end, to the handler
    that was in place before (so SIGINT still raises ``KeyboardInterrupt`` and
    SIGTERM whatever the runner installed). Signals that arrive while the
    section unwinds from its own exception are delivered the same way.
    """
    if not _in_main_thread():
        yield
        return
    held: list[signal.Signals] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signal.Signals(signum))

    previous = {sig: signal.signal(sig, hold) for sig in SIGNALS}
    try:
        yield
    finally:
        restore_handlers(previous)
        if held:
            first = held[0]
            handler = previous[first]
            if callable(handler):
                handler(int(first), None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(first)
