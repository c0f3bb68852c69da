"""CPU backend: a correct torch implementation of attention over 1-token pages.

KV cache layout: ``(2, num_slots, 1, num_kv_heads, head_size)``; a request's
K/V are gathered through its row of the block table, which holds one slot id
per token. New K/V are written through ``slot_mapping``. Decode-only batches
are computed in one padded, batched pass; prefill chunks one request at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)

from vllm_proxima.attention.pages import OneTokenPages


class ProximaTorchAttentionBackend(OneTokenPages, AttentionBackend):
    forward_includes_kv_cache_update: bool = False
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [
        torch.float16,
        torch.bfloat16,
        torch.float32,
    ]
    supported_kv_cache_dtypes: ClassVar[list[Any]] = ["auto"]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any

    @staticmethod
    def get_impl_cls() -> type[ProximaTorchAttentionImpl]:
        return ProximaTorchAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[ProximaTorchMetadataBuilder]:
        return ProximaTorchMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def use_cascade_attention(*args: Any, **kwargs: Any) -> bool:
        return False


@dataclass(slots=True)
class ProximaTorchMetadata(AttentionMetadata):
    num_actual_tokens: int
    query_start_loc: list[int]
    seq_lens: list[int]
    max_seq_len: int
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    causal: bool
    decode_only: bool


class ProximaTorchMetadataBuilder(AttentionMetadataBuilder[ProximaTorchMetadata]):
    def __init__(
        self,
        kv_cache_spec: Any,
        layer_names: list[str],
        vllm_config: Any,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> ProximaTorchMetadata:
        m = common_attn_metadata
        num_reqs = m.num_reqs
        # One host sync per step, shared by every layer.
        query_start_loc = m.query_start_loc_cpu[: num_reqs + 1].tolist()
        seq_lens = m.seq_lens[:num_reqs].cpu().tolist()
        causal = m.causal if isinstance(m.causal, bool) else True
        return ProximaTorchMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
            max_seq_len=max(seq_lens, default=0),
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
            causal=causal,
            decode_only=m.max_query_len == 1,
        )


class ProximaTorchAttentionImpl(AttentionImpl[ProximaTorchMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        unsupported = []
        if alibi_slopes is not None:
            unsupported.append("ALiBi")
        if sliding_window is not None:
            unsupported.append("sliding window")
        if logits_soft_cap:
            unsupported.append("logits soft-capping")
        if sinks is not None:
            unsupported.append("attention sinks")
        if attn_type != AttentionType.DECODER:
            unsupported.append(f"{attn_type} attention")
        if kv_cache_dtype != "auto":
            unsupported.append(f"KV cache dtype {kv_cache_dtype}")
        if unsupported:
            raise NotImplementedError(
                "proxima's CPU attention backend does not support "
                + ", ".join(unsupported)
                + "; use --proxima off"
            )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.num_queries_per_kv = self.num_heads // self.num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def _split(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values, each ``[num_slots, num_kv_heads, head_size]`` views.

        vLLM 0.26 hands each layer ``[2, num_slots, 1, num_kv_heads, head_size]`` (this
        backend's ``get_kv_cache_shape``). From 0.32 vLLM lays the cache out itself and hands
        a logical ``[num_slots, num_kv_heads, 1, content]`` view whose content holds a
        token's key then its value (as its CPU backend reads it); with 1-token pages the
        page axis has size 1, so the views need no copy.
        """
        h, d = self.num_kv_heads, self.head_size
        if kv_cache.dim() == 5:
            return kv_cache[0].view(-1, h, d), kv_cache[1].view(-1, h, d)
        if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] != 2 * d:
            raise ValueError(
                f"proxima's torch backend reads 1-token pages; got a KV cache of shape "
                f"{tuple(kv_cache.shape)} for {h} KV heads of size {d}"
            )
        pages = kv_cache[:, :, 0, :]  # [num_slots, num_kv_heads, 2 * head_size]
        return pages[..., :d], pages[..., d:]

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write new K/V to their slots (``slot_mapping``; -1 marks padding)."""
        n = slot_mapping.shape[0]
        slots = slot_mapping.to(torch.long)
        valid = slots >= 0
        key_cache, value_cache = self._split(kv_cache)
        if bool(valid.all()):
            key_cache.index_copy_(0, slots, key[:n])
            value_cache.index_copy_(0, slots, value[:n])
        else:
            key_cache.index_copy_(0, slots[valid], key[:n][valid])
            value_cache.index_copy_(0, slots[valid], value[:n][valid])

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: ProximaTorchMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention for a batch.

        Args:
            query: ``[num_tokens, num_heads, head_size]``
            kv_cache: ``[2, num_slots, 1, num_kv_heads, head_size]`` (vLLM 0.26) or
                ``[num_slots, num_kv_heads, 1, 2 * head_size]`` (0.32+; see :meth:`_split`)
            output: ``[num_tokens, num_heads, head_size]``, written in place.
        """
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported")
        if attn_metadata is None:  # profiling run
            return output
        key_cache, value_cache = self._split(kv_cache)
        m = attn_metadata
        if m.decode_only:
            self._decode(query, key_cache, value_cache, m, output)
            return output
        qsl = m.query_start_loc
        for i, seq_len in enumerate(m.seq_lens):
            start, end = qsl[i], qsl[i + 1]
            if end == start:
                continue
            slots = m.block_table[i, :seq_len].to(torch.long)
            k = key_cache.index_select(0, slots)
            v = value_cache.index_select(0, slots)
            output[start:end] = self._attend(query[start:end], k, v, m.causal)
        return output

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
    ) -> torch.Tensor:
        """One request: ``q [Lq, H, D]`` against ``k, v [Lk, Hkv, D]``; the queries
        are the last ``Lq`` positions of the sequence."""
        q_len, k_len = q.shape[0], k.shape[0]
        if self.num_queries_per_kv > 1:
            k = k.repeat_interleave(self.num_queries_per_kv, dim=1)
            v = v.repeat_interleave(self.num_queries_per_kv, dim=1)
        mask = None
        if causal and q_len > 1:
            q_pos = torch.arange(k_len - q_len, k_len).unsqueeze(1)
            mask = torch.arange(k_len).unsqueeze(0) <= q_pos
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1),
            k.transpose(0, 1),
            v.transpose(0, 1),
            attn_mask=mask,
            scale=self.scale,
        )
        return out.transpose(0, 1)

    def _decode(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        m: ProximaTorchMetadata,
        output: torch.Tensor,
    ) -> None:
        """All requests decode one token: gather K/V padded to the longest."""
        num_reqs = len(m.seq_lens)
        max_len = m.max_seq_len
        slots = m.block_table[:num_reqs, :max_len].to(torch.long)
        lens = torch.tensor(m.seq_lens, dtype=torch.long)
        valid = torch.arange(max_len).unsqueeze(0) < lens.unsqueeze(1)
        slots = torch.where(valid, slots, torch.zeros_like(slots))
        k = key_cache[slots]  # [B, L, Hkv, D]
        v = value_cache[slots]
        if self.num_queries_per_kv > 1:
            k = k.repeat_interleave(self.num_queries_per_kv, dim=2)
            v = v.repeat_interleave(self.num_queries_per_kv, dim=2)
        q = query[:num_reqs].unsqueeze(2)  # [B, H, 1, D]
        out = torch.nn.functional.scaled_dot_product_attention(
            q,
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=valid[:, None, None, :],
            scale=self.scale,
        )
        output[:num_reqs] = out.squeeze(2)
