"""Benchmarks for proxima-vllm.

Serving A/B through the OpenAI server (``python -m vllm_proxima.bench.serve_ab``)
and its pieces: ``workloads`` (seeded vLLM ``custom`` JSONL datasets with
token-exact prompt lengths), ``vllm_bench`` (runs vLLM's own ``vllm bench
serve``), ``server`` (start / health / stop of one API server),
``metrics_scrape`` (``/metrics`` time series), ``report`` (markdown and PNG
plots), ``runinfo`` (machine and git facts) and the capacity ``planner``
(``python -m vllm_proxima.bench.planner``). None of them imports vLLM at
module import time; ``planner``, ``report`` and length sampling in
``workloads`` work without it.
"""
