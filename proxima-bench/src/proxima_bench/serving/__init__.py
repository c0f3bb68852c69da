"""Serving A/B and the workload matrix through the OpenAI server (HTTP, ``/metrics``)."""
