"""Token-granularity KV cache management: the global slot pool."""

from vllm_proxima.kv.slot_pool import SlotPool

__all__ = ["SlotPool"]
