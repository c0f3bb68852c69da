"""The ``upstream`` marker and a per-mode summary of upstream's test runs."""

from __future__ import annotations

import pytest

# Filled by test_upstream_core.py: one line per proxima mode, printed at the end of the session.
SUMMARY: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "upstream: runs upstream vLLM's own tests from the sdist against the patched tree",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not SUMMARY:
        return
    terminalreporter.section("upstream vLLM tests (tests/upstream)")
    for _mode, report in sorted(SUMMARY.items()):
        for line in report.splitlines():
            terminalreporter.write_line(line)
