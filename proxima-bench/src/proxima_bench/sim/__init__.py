"""The scheduler simulator: vLLM's real scheduler, a fake model (``simulate``, ``report``)."""
