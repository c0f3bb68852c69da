"""``--measure``: greedy-decoding statistics of the built model with transformers (float32)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxima_tools.tiny_model.recipe import SPECIAL_TOKENS


@dataclass(frozen=True)
class LogitStats:
    """Greedy-decoding statistics of a model on random prompts (float32)."""

    prompts: int
    steps: int
    mean_gap: float  # mean over all steps of top-1 minus top-2 logit
    min_gap: float
    frac_gap_below_0_1: float
    mean_distinct: float  # mean number of distinct tokens per continuation
    min_distinct: int
    collapsed: int  # continuations whose second half is one repeated token
    sample: str  # decoded continuation of the first prompt


def measure_logits(
    model_dir: Path,
    n_prompts: int = 50,
    min_len: int = 20,
    max_len: int = 200,
    new_tokens: int = 32,
    seed: int = 0,
) -> LogitStats:
    """Greedy-decode random-token prompts with transformers in float32 and
    measure how peaky the logits are and how varied the continuations are.

    Prompts are ``<s>`` followed by uniformly random non-special token ids,
    with lengths uniform in [min_len, max_len].  Needs torch and transformers.
    """
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    vocab_size = int(model.config.vocab_size)
    first_regular = len(SPECIAL_TOKENS)
    rng = np.random.Generator(np.random.PCG64(seed))
    gaps: list[Any] = []
    distinct: list[int] = []
    collapsed = 0
    sample = ""
    with torch.inference_mode():
        for index in range(n_prompts):
            length = int(rng.integers(min_len, max_len + 1))
            body = rng.integers(first_regular, vocab_size, size=length - 1).tolist()
            input_ids = torch.tensor([[tokenizer.bos_token_id, *body]])
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
            )
            logits = torch.stack(out.logits, dim=1)[0].float()
            top2 = logits.topk(2, dim=-1).values
            gaps.append(top2[:, 0] - top2[:, 1])
            continuation = out.sequences[0, length:].tolist()
            distinct.append(len(set(continuation)))
            collapsed += len(set(continuation[new_tokens // 2 :])) == 1
            if index == 0:
                sample = tokenizer.decode(continuation)
    all_gaps = torch.cat(gaps)
    return LogitStats(
        prompts=n_prompts,
        steps=int(all_gaps.numel()),
        mean_gap=float(all_gaps.mean()),
        min_gap=float(all_gaps.min()),
        frac_gap_below_0_1=float((all_gaps < 0.1).float().mean()),
        mean_distinct=float(np.mean(distinct)),
        min_distinct=min(distinct),
        collapsed=collapsed,
        sample=sample,
    )
