"""Tests of the tools package (tools/proxima_tools): pytest imports it through the ``pythonpath``
option in pyproject.toml; the tools' command lines run in child processes, which get ``tools/`` on
``PYTHONPATH`` here."""

from __future__ import annotations

import os

from tests.tools.utils import TOOLS

_path = os.environ.get("PYTHONPATH", "")
if str(TOOLS) not in _path.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TOOLS), _path) if p)
