"""Workloads every bench shares: one request-length model and what is built on it.

``lengths``: seeded length distributions and the named workloads (``baseline``,
``sharegpt``, ``shared-system``, ...); ``tokens``: token-id workloads of exact
lengths for the engine A/B and the simulator; ``datasets``: token-exact prompt
text written as vLLM ``custom`` JSONL for the serving A/B (``python -m
proxima_bench.workloads``).
"""

from proxima_bench.workloads.datasets import (
    PromptBuilder,
    TokenizerLike,
    WorkloadFile,
    load_tokenizer,
    main,
    read_lengths,
    write_dataset,
)
from proxima_bench.workloads.lengths import (
    LONG_OUTPUT,
    LONG_PROMPT,
    SHAREGPT_MEAN_OUTPUT,
    SHAREGPT_MEAN_PROMPT,
    SHAREGPT_OUTPUT_MU,
    SHAREGPT_OUTPUT_SIGMA,
    SHAREGPT_PROMPT_MU,
    SHAREGPT_PROMPT_SIGMA,
    WORKLOAD_NAMES,
    Baseline,
    Chat,
    LogNormal,
    Mixed,
    Request,
    SharedSystem,
    ShareGPTLike,
    Workload,
    WorkloadError,
    draw_uniform,
    length_summary,
    make_workload,
)

__all__ = [
    "LONG_OUTPUT",
    "LONG_PROMPT",
    "SHAREGPT_MEAN_OUTPUT",
    "SHAREGPT_MEAN_PROMPT",
    "SHAREGPT_OUTPUT_MU",
    "SHAREGPT_OUTPUT_SIGMA",
    "SHAREGPT_PROMPT_MU",
    "SHAREGPT_PROMPT_SIGMA",
    "WORKLOAD_NAMES",
    "Baseline",
    "Chat",
    "LogNormal",
    "Mixed",
    "PromptBuilder",
    "Request",
    "ShareGPTLike",
    "SharedSystem",
    "TokenizerLike",
    "Workload",
    "WorkloadError",
    "WorkloadFile",
    "draw_uniform",
    "length_summary",
    "load_tokenizer",
    "main",
    "make_workload",
    "read_lengths",
    "write_dataset",
]
