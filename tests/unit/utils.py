"""Factories shared by the unit tests (no engine, no model run)."""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count()


def make_request(
    num_prompt_tokens: int, max_tokens: int = 16, request_id: str | None = None
) -> Any:
    """A vLLM v1 ``Request`` with a token-id prompt, as the scheduler sees it."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return Request(
        request_id=request_id or f"req-{next(_ids)}",
        prompt_token_ids=list(range(3, 3 + num_prompt_tokens)),
        sampling_params=params,
        pooling_params=None,
    )
