"""Local stand-ins for the Hub models upstream's tests name: configs written with transformers'
classes (one tiny set of weights), the embedded tiny model, and a hub cache redirecting to them."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxima_tools.upstream_tests.common import TINY_MODEL, log


@dataclass(frozen=True)
class ModelSpec:
    """How to stand in for one Hugging Face model id the upstream tests name."""

    model_id: str
    why: str
    # Writes config.json (and whatever else) into the folder; None: use the tiny model.
    write: Callable[[Path], None] | None
    tokenizer: bool = False


def _save_config(config: Any, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)


def _copy_tokenizer(folder: Path) -> None:
    """The tiny model's tokenizer (a byte-level BPE): enough where a test only needs one."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (TINY_MODEL / name).is_file():
            shutil.copy2(TINY_MODEL / name, folder / name)


def _opt_125m(folder: Path) -> None:
    from transformers import OPTConfig

    _save_config(
        OPTConfig(
            vocab_size=50272,
            hidden_size=768,
            num_hidden_layers=12,
            ffn_dim=3072,
            num_attention_heads=12,
            max_position_embeddings=2048,
            word_embed_proj_dim=768,
            do_layer_norm_before=True,
            pad_token_id=1,
            bos_token_id=2,
            eos_token_id=2,
            dtype="float16",
            architectures=["OPTForCausalLM"],
        ),
        folder,
    )


def _qwen15_7b(folder: Path) -> None:
    from transformers import Qwen2Config

    _save_config(
        Qwen2Config(
            vocab_size=151936,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            sliding_window=32768,
            use_sliding_window=False,
            max_window_layers=28,
            tie_word_embeddings=False,
            bos_token_id=151643,
            eos_token_id=151643,
            dtype="bfloat16",
            architectures=["Qwen2ForCausalLM"],
        ),
        folder,
    )


def _llava_15_7b(folder: Path) -> None:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    _save_config(
        LlavaConfig(
            text_config=LlamaConfig(
                vocab_size=32064,
                hidden_size=4096,
                intermediate_size=11008,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=32,
                max_position_embeddings=4096,
                rms_norm_eps=1e-5,
                pad_token_id=0,
                dtype="float16",
            ).to_dict(),
            vision_config=CLIPVisionConfig(
                hidden_size=1024,
                intermediate_size=4096,
                num_hidden_layers=24,
                num_attention_heads=16,
                image_size=336,
                patch_size=14,
                projection_dim=768,
                hidden_act="quick_gelu",
            ).to_dict(),
            image_token_index=32000,
            projector_hidden_act="gelu",
            vision_feature_layer=-2,
            vision_feature_select_strategy="default",
            dtype="float16",
            architectures=["LlavaForConditionalGeneration"],
        ),
        folder,
    )


def _qwen25_vl_3b(folder: Path) -> None:
    """Config and image-processor settings of Qwen2.5-VL-3B-Instruct (no weights)."""
    from transformers import Qwen2_5_VLConfig

    text = {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "sliding_window": 32768,
        "use_sliding_window": False,
        "max_window_layers": 70,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    }
    vision = {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    }
    _save_config(
        Qwen2_5_VLConfig(
            text_config=text,
            vision_config=vision,
            image_token_id=151655,
            video_token_id=151656,
            vision_start_token_id=151652,
            vision_end_token_id=151653,
            tie_word_embeddings=True,
            dtype="bfloat16",
            architectures=["Qwen2_5_VLForConditionalGeneration"],
        ),
        folder,
    )
    preprocessor = {
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")


def _qwen3_06b_tiny(folder: Path) -> None:
    """Qwen3-0.6B's attention geometry and context length, tiny hidden size, random weights.

    ``ModelConfig()``'s default model is Qwen/Qwen3-0.6B (many kv-cache tests build one) and
    test_reset_prefix_cache_e2e generates text with it.  The KV cache per token (28 layers,
    8 KV heads of 128) and max_position_embeddings are the published ones; hidden size,
    MLP and vocabulary are shrunk (the vocabulary to the tiny model's tokenizer) so the
    weights are ~25 MB.  Embeddings (tied to the LM head) are scaled up so that greedy
    decoding has clear winners and does not flip with batch composition.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        dtype="bfloat16",
        architectures=["Qwen3ForCausalLM"],
    )
    torch.manual_seed(20260)
    model = Qwen3ForCausalLM(config)
    embeddings = model.get_input_embeddings()
    assert isinstance(embeddings, torch.nn.Embedding)
    with torch.no_grad():
        embeddings.weight.normal_(0.0, 1.0)
    model.bfloat16().save_pretrained(folder)
    _copy_tokenizer(folder)


MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("facebook/opt-125m", "create_scheduler's default model (config only)", _opt_125m),
    ModelSpec(
        "Qwen/Qwen1.5-7B", "max_model_len estimates from its sizes (config only)", _qwen15_7b
    ),
    ModelSpec(
        "llava-hf/llava-1.5-7b-hf",
        "multimodal scheduler tests (config only; its model module does not import here)",
        _llava_15_7b,
    ),
    ModelSpec(
        "Qwen/Qwen2.5-VL-3B-Instruct",
        "test_priority_scheduler_random (config, image processor settings, a tokenizer)",
        _qwen25_vl_3b,
        tokenizer=True,
    ),
    ModelSpec(
        "Qwen/Qwen3-0.6B",
        "ModelConfig()'s default and test_reset_prefix_cache_e2e (tiny random weights)",
        _qwen3_06b_tiny,
    ),
    ModelSpec(
        "hmellor/tiny-random-LlamaForCausalLM",
        "test_scheduler_e2e generates text; any small random Llama does (our tiny model)",
        None,
    ),
)


def write_models(root: Path, specs: Iterable[ModelSpec]) -> dict[str, str]:
    """Write a folder per model id under ``root``; return the redirect map (id -> folder)."""
    mapping: dict[str, str] = {}
    for spec in specs:
        if spec.write is None:
            if not (TINY_MODEL / "config.json").is_file():
                log(f"{spec.model_id}: {TINY_MODEL} is missing (tiny_model); left out")
                continue
            mapping[spec.model_id] = str(TINY_MODEL)
            continue
        folder = root / spec.model_id.replace("/", "--")
        shutil.rmtree(folder, ignore_errors=True)
        spec.write(folder)
        if spec.tokenizer:
            _copy_tokenizer(folder)
        mapping[spec.model_id] = str(folder)
    return mapping


def write_hub_cache(root: Path, mapping: dict[str, str]) -> None:
    """A Hugging Face hub cache (``HF_HUB_CACHE``) holding each mapped folder as a snapshot.

    With ``HF_HUB_OFFLINE=1``, ``EngineArgs`` resolves the model id through the hub cache
    (``get_model_path``) before vLLM's redirect map is consulted, so tests that build an
    engine need the ids there too.  Snapshot files are symlinks to the model folders.
    """
    shutil.rmtree(root, ignore_errors=True)
    for model_id, folder in mapping.items():
        revision = hashlib.sha1(model_id.encode()).hexdigest()
        repo = root / f"models--{model_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(revision)
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for item in Path(folder).iterdir():
            (snapshot / item.name).symlink_to(item.resolve())


_MODEL_ID = re.compile(rb"""["']([A-Za-z0-9][\w.-]*/[\w.-]+)["']""")


def model_ids_named(files: dict[str, bytes], suite: Sequence[str]) -> set[str]:
    """String literals shaped like ``owner/name`` in the suite's test files (a rough scan)."""
    found: set[str] = set()
    for path, data in files.items():
        if path.endswith(".py") and any(path.startswith(s.rstrip("/") + "/") for s in suite):
            found |= {m.decode() for m in _MODEL_ID.findall(data)}
    return {m for m in found if not m.endswith((".py", ".txt", ".json", ".yaml"))}
