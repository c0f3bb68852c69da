"""Engine A/B in one process: stock vs proxima through vLLM's ``LLMEngine`` (``ab``, ``report``)."""
