"""The vLLM release these tests run on: the pin (``upstream.lock``), or the next release when
``scripts/next_upstream.sh`` runs them against it (it sets ``PROXIMA_NEXT_VLLM``)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def pinned_vllm() -> str:
    """``[upstream] version`` of ``upstream.lock`` (what proxima_tools.upstream reads)."""
    with open(REPO / "upstream.lock", "rb") as f:
        return str(tomllib.load(f)["upstream"]["version"])


UPSTREAM_VLLM = os.environ.get("PROXIMA_NEXT_VLLM") or pinned_vllm()
