"""Upstream vLLM's own tests (from the pinned sdist) run against the patched tree."""
