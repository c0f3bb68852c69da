"""Helpers shared by the tools' tests."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"


def tool_cmd(tool: str) -> list[str]:
    """The command line of ``python -m proxima_tools.<tool>`` with this interpreter."""
    return [sys.executable, "-m", f"proxima_tools.{tool}"]
