"""The ``vllm.general_plugins`` entry point, loaded in every vLLM process."""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.proxima")

_registered = False


def register() -> None:
    """Register proxima's attention backend as vLLM's CUSTOM backend.

    Proxima mode selects it (``--attention-backend CUSTOM`` is set by
    ``vllm_proxima.engine_args``); with ``--proxima off`` it is never chosen.
    """
    global _registered
    if _registered:
        return
    from vllm.v1.attention.backends.registry import (
        AttentionBackendEnum,
        register_backend,
    )

    from vllm_proxima.attention import backend_path_for_current_platform

    register_backend(AttentionBackendEnum.CUSTOM, backend_path_for_current_platform())
    _registered = True
