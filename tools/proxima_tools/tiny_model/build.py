"""Writing a build atomically, its manifest, its file modes, and recognising a complete one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from proxima_tools.tiny_model.recipe import MANIFEST_NAME, MODEL_FILES, RECIPE, RECIPE_VERSION
from proxima_tools.tiny_model.tokenizer import (
    _token_ids,
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


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_model_files(folder: Path) -> None:
    from safetensors.numpy import save_file

    tok = train_tokenizer()
    ids = _token_ids(tok)
    vocab_size = int(tok.get_vocab_size())
    (folder / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    _write_json(folder / "tokenizer_config.json", tokenizer_config_dict(ids))
    _write_json(folder / "special_tokens_map.json", special_tokens_map_dict())
    _write_json(folder / "config.json", config_dict(vocab_size, ids))
    _write_json(folder / "generation_config.json", generation_config_dict(ids))
    save_file(
        make_weights(vocab_size, muted_token_ids(tok)),
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    manifest = {
        "recipe": RECIPE,
        "recipe_version": RECIPE_VERSION,
        "files": {name: _sha256(folder / name) for name in MODEL_FILES},
    }
    _write_json(folder / MANIFEST_NAME, manifest)


def _make_readable(folder: Path) -> None:
    """Folder 0755, files 0644, whatever the umask and writers chose.

    NOTE: safetensors writes ``model.safetensors`` as 0600. A container running as another UID
    (the images' ``nonroot`` target) then can't read the weights, and vLLM reports that as a
    missing file, which sends users looking in the wrong place.
    """
    folder.chmod(0o755)
    for path in folder.iterdir():
        if path.is_file() and (path.stat().st_mode & 0o777) != 0o644:
            path.chmod(0o644)


def is_complete(out: Path) -> bool:
    """True when ``out`` holds an intact build of this recipe version."""
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        return False
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if manifest.get("recipe") != RECIPE or manifest.get("recipe_version") != RECIPE_VERSION:
        return False
    files = manifest.get("files", {})
    if set(files) != set(MODEL_FILES):
        return False
    return all(
        (out / name).is_file() and _sha256(out / name) == digest for name, digest in files.items()
    )


def make_tiny_model(out: Path, force: bool = False) -> Path:
    """Build the tiny model into ``out`` (atomically) and return ``out``.

    An existing complete build is reused unless ``force``.  An existing folder
    that is not a complete build is only replaced with ``force``.
    """
    out = Path(out).absolute()
    if out.exists() and not force:
        if is_complete(out):
            with contextlib.suppress(OSError):  # not ours, or read-only: left as it is
                _make_readable(out)  # a build from before the modes were set
            return out
        raise FileExistsError(
            f"{out} exists but is not a complete {RECIPE} v{RECIPE_VERSION} build; "
            "pass --force (force=True) to replace it"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_model_files(tmp)
        _make_readable(tmp)
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, trash / "old")
            os.replace(tmp, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            try:
                os.replace(tmp, out)
            except OSError:
                # A concurrent build won the race; its result is identical.
                if not is_complete(out):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
