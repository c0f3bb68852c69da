"""proxima-bench: benchmarks for proxima-vllm, driving the engine from outside.

Subpackages by purpose (``README.md`` beside this file says where what goes):
``workloads`` (the one request-length model, token-id workloads, vLLM ``custom``
JSONL datasets), ``sim`` (vLLM's real scheduler with a fake model, on a CPU),
``engine`` (in-process engine A/B), ``serving`` (A/B and the workload matrix
through the OpenAI server, ``vllm bench serve``, ``/metrics``), ``planner``
(capacity planning, model-shape folders), ``kernels`` (attention kernel timing).
None of them imports vLLM at module import time; ``planner``, the reports and
length sampling in ``workloads`` work without it.
"""

__version__ = "0.1.0"
