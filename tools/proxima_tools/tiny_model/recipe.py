"""The recipe: its name and version, seeds, sizes, special tokens, chat template, the model's shape
and init scales, and the files a build holds."""

from __future__ import annotations

from dataclasses import dataclass

RECIPE = "proxima-tiny-llama"


# Bump whenever anything that changes the written bytes changes.
RECIPE_VERSION = 1


MANIFEST_NAME = "tiny-model-manifest.json"


CORPUS_SEED = 20260


WEIGHT_SEED = 1234


VOCAB_SIZE = 1024


CORPUS_LINES = 3000


BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"


ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")


SPECIAL_TOKENS = (UNK, BOS, EOS, PAD, *ROLE_TOKENS)


CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    """Architecture of the tiny model."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5


@dataclass(frozen=True)
class InitScale:
    """Random-init scales, chosen for peaky yet context-dependent logits.

    ``embed`` is the per-element std of the token embeddings.  The others are
    the std of a projection's *output* for a unit-RMS input (per-element std
    is that divided by sqrt(fan_in)): ``qk`` sets how sharp attention is,
    ``vo`` how much attention writes into the residual stream, ``mlp`` the
    same for the MLP, ``lm_head`` the logit std (hence the top-1/top-2 gap).
    """

    embed: float = 1.0
    qk: float = 1.5
    vo: float = 1.0
    mlp: float = 1.0
    lm_head: float = 10.0


SHAPE = Shape()


INIT = InitScale()


MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


ALL_FILES = (*MODEL_FILES, MANIFEST_NAME)
