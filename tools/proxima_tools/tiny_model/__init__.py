"""Build the embedded default model: a tiny, seeded, random-weight Llama.

``PYTHONPATH=tools python -m proxima_tools.tiny_model --out models/tiny-llama [--force]`` writes a
Hugging Face-format folder (config, safetensors weights, byte-level BPE
tokenizer with a chat template, generation config) that vLLM serves on CPU.

Everything is derived from fixed seeds and an in-code corpus, so two builds
give byte-identical files.  The build needs only ``numpy``, ``tokenizers`` and
``safetensors`` (no torch) and takes a few seconds.

The weights are random but scaled so that logits are peaky: greedy decoding
then rarely flips between two attention implementations because of rounding
noise.  ``--measure`` (transformers, float32, 50 random-token prompts of
20-200 tokens, 32 greedy tokens each) gave: mean top-1/top-2 logit gap 3.04,
3.4% of steps with a gap below 0.1, 30.5 distinct tokens per 32-token
continuation (min 24), no continuation collapsed to one repeated token.
Special tokens and non-printable byte tokens are never generated (see
:func:`muted_token_ids`), so outputs run to max_tokens as printable ASCII.
"""

from __future__ import annotations

import os

# Single-threaded, order-stable tokenizer training.  These must be set before
# ``tokenizers`` first builds its thread pool, so before any submodule is imported;
# train_tokenizer() also turns TOKENIZERS_PARALLELISM off while it trains, in case
# tokenizers was imported (and its pool built) before this package.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")

from proxima_tools.tiny_model.build import (
    is_complete,
    make_tiny_model,
)
from proxima_tools.tiny_model.cli import (
    main,
)
from proxima_tools.tiny_model.corpus import (
    corpus_lines,
)
from proxima_tools.tiny_model.measure import (
    LogitStats,
    measure_logits,
)
from proxima_tools.tiny_model.recipe import (
    ALL_FILES,
    BOS,
    CHAT_TEMPLATE,
    CORPUS_LINES,
    CORPUS_SEED,
    EOS,
    INIT,
    MANIFEST_NAME,
    MODEL_FILES,
    PAD,
    RECIPE,
    RECIPE_VERSION,
    ROLE_TOKENS,
    SHAPE,
    SPECIAL_TOKENS,
    UNK,
    VOCAB_SIZE,
    WEIGHT_SEED,
    InitScale,
    Shape,
)
from proxima_tools.tiny_model.tokenizer import (
    special_tokens_map_dict,
    tokenizer_config_dict,
    train_tokenizer,
)
from proxima_tools.tiny_model.weights import (
    config_dict,
    generation_config_dict,
    make_weights,
    muted_token_ids,
)

__all__ = [
    "ALL_FILES",
    "BOS",
    "CHAT_TEMPLATE",
    "CORPUS_LINES",
    "CORPUS_SEED",
    "EOS",
    "INIT",
    "InitScale",
    "LogitStats",
    "MANIFEST_NAME",
    "MODEL_FILES",
    "PAD",
    "RECIPE",
    "RECIPE_VERSION",
    "ROLE_TOKENS",
    "SHAPE",
    "SPECIAL_TOKENS",
    "Shape",
    "UNK",
    "VOCAB_SIZE",
    "WEIGHT_SEED",
    "config_dict",
    "corpus_lines",
    "generation_config_dict",
    "is_complete",
    "main",
    "make_tiny_model",
    "make_weights",
    "measure_logits",
    "muted_token_ids",
    "special_tokens_map_dict",
    "tokenizer_config_dict",
    "train_tokenizer",
]
