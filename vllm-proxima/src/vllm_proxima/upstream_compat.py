"""What differs between the vLLM releases this package runs on.

The pin is vLLM 0.26.0 (GPU-proven); the patch series also rides the next release
(``patches/next/``, docs/upstream/next.md), whose CPU tests run this same package. Each
difference is one flag here, read once at import, so the code that depends on it says
which release behaviour it follows.
"""

from __future__ import annotations


def _scheduler_records_hits() -> bool:
    """Whether upstream's scheduler records a prefix-cache lookup itself, once, when the
    request is admitted (``KVCacheManager.record_prefix_cache_stats``, vLLM 0.27 on).
    Before, ``get_computed_blocks`` recorded every lookup, a waiting request's included."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    return hasattr(KVCacheManager, "record_prefix_cache_stats")


SCHEDULER_RECORDS_HITS = _scheduler_records_hits()
