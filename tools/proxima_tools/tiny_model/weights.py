"""The model's config and its seeded random weights, scaled for peaky logits, with the rows of
tokens it must never generate zeroed."""

from __future__ import annotations

import string
from typing import Any

from proxima_tools.tiny_model.recipe import (
    BOS,
    EOS,
    INIT,
    PAD,
    SHAPE,
    WEIGHT_SEED,
    InitScale,
    Shape,
)
from proxima_tools.tiny_model.tokenizer import _token_ids


def config_dict(vocab_size: int, ids: dict[str, int], shape: Shape = SHAPE) -> dict[str, Any]:
    """config.json contents (legacy and transformers-5 key spellings both present)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "mlp_bias": False,
        "num_attention_heads": shape.num_heads,
        "num_hidden_layers": shape.num_layers,
        "num_key_value_heads": shape.num_kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }


def generation_config_dict(ids: dict[str, int]) -> dict[str, Any]:
    """generation_config.json: token ids only, so vLLM's defaults stay greedy-neutral."""
    return {
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
    }


def muted_token_ids(tok: Any) -> list[int]:
    """Ids the model should never generate: special tokens, and byte tokens that
    are not printable ASCII (partial UTF-8, control bytes).

    Their lm_head rows are zero, so their logit is 0 while the top logit is
    around +30: greedy never picks them and sampling essentially never does.
    Generations therefore run to max_tokens (no stray ``</s>``) and detokenize
    to clean printable text.
    """
    allowed = set(string.printable) - {"\r", "\x0b", "\x0c"}
    special = set(_token_ids(tok).values())
    muted = []
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id], skip_special_tokens=False)
        if token_id in special or not text or any(ch not in allowed for ch in text):
            muted.append(token_id)
    return muted


def make_weights(
    vocab_size: int,
    muted_ids: list[int] | tuple[int, ...] = (),
    shape: Shape = SHAPE,
    scale: InitScale = INIT,
    seed: int = WEIGHT_SEED,
) -> dict[str, Any]:
    """Seeded random float32 weights in HF Llama naming (numpy arrays).

    Drawn in float64 with numpy's PCG64 generator (platform independent), then
    cast to float32, so the bytes do not depend on torch or the CPU.  Rows of
    ``lm_head`` listed in ``muted_ids`` are zero (see :func:`muted_token_ids`).
    """
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    h, inter = shape.hidden_size, shape.intermediate_size
    q_out = shape.num_heads * shape.head_dim
    kv_out = shape.num_kv_heads * shape.head_dim

    def normal(rows: int, cols: int, std: float) -> Any:
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def linear(out_features: int, in_features: int, out_std: float) -> Any:
        return normal(out_features, in_features, out_std / in_features**0.5)

    def ones() -> Any:
        return np.ones((h,), dtype=np.float32)

    # Linear weights are [out, in] as in transformers.
    weights: dict[str, Any] = {"model.embed_tokens.weight": normal(vocab_size, h, scale.embed)}
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = ones()
        weights[p + "self_attn.q_proj.weight"] = linear(q_out, h, scale.qk)
        weights[p + "self_attn.k_proj.weight"] = linear(kv_out, h, scale.qk)
        weights[p + "self_attn.v_proj.weight"] = linear(kv_out, h, 1.0)
        weights[p + "self_attn.o_proj.weight"] = linear(h, q_out, scale.vo)
        weights[p + "post_attention_layernorm.weight"] = ones()
        weights[p + "mlp.gate_proj.weight"] = linear(inter, h, 1.0)
        weights[p + "mlp.up_proj.weight"] = linear(inter, h, 1.0)
        weights[p + "mlp.down_proj.weight"] = linear(h, inter, scale.mlp)
    weights["model.norm.weight"] = ones()
    lm_head = linear(vocab_size, h, scale.lm_head)
    lm_head[list(muted_ids)] = 0.0
    weights["lm_head.weight"] = lm_head
    return weights
