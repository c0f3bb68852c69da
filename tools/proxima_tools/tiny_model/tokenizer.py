"""The byte-level BPE tokenizer, trained single-threaded so two builds are byte-identical, and its
Hugging Face config files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proxima_tools.tiny_model.corpus import corpus_lines
from proxima_tools.tiny_model.recipe import (
    BOS,
    CHAT_TEMPLATE,
    CORPUS_LINES,
    EOS,
    PAD,
    ROLE_TOKENS,
    SHAPE,
    SPECIAL_TOKENS,
    UNK,
    VOCAB_SIZE,
)


@contextmanager
def _serial_tokenizers() -> Iterator[None]:
    """Force tokenizers to train without parallel iterators, then restore env."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> Any:
    """Train a byte-level BPE tokenizer on the in-code corpus."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with _serial_tokenizers():
        tok.train_from_iterator(corpus_lines(), trainer=trainer, length=CORPUS_LINES)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tokenizer training produced {tok.get_vocab_size()} tokens, expected "
            f"{vocab_size}; the corpus is too small for this vocabulary"
        )
    # Llama style: prepend <s> when encoding with add_special_tokens=True.
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A",
                pair=f"{BOS} $A {BOS} $B",
                special_tokens=[(BOS, tok.token_to_id(BOS))],
            ),
        ]
    )
    return tok


def _token_ids(tok: Any) -> dict[str, int]:
    ids: dict[str, int] = {}
    for name in SPECIAL_TOKENS:
        token_id = tok.token_to_id(name)
        if token_id is None:
            raise RuntimeError(f"special token {name!r} missing from the vocabulary")
        ids[name] = int(token_id)
    return ids


def tokenizer_config_dict(ids: dict[str, int]) -> dict[str, Any]:
    """tokenizer_config.json contents."""
    added = {
        str(ids[name]): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for name in SPECIAL_TOKENS
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": list(ROLE_TOKENS),
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE.max_position_embeddings,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map_dict() -> dict[str, Any]:
    """special_tokens_map.json contents."""
    return {
        "additional_special_tokens": list(ROLE_TOKENS),
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
    }
