"""The ``series`` file (apply order, comments kept) and patch file names made from subjects."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxima_tools.series.common import (
    DEFAULT_PATCHES,
    PATCHES_ENV,
    SERIES_FILE,
    SERIES_HEADER,
    SUBJECT_MAX,
    SeriesError,
)


@dataclass
class Series:
    """A parsed ``series`` file, keeping comments so rewrites preserve them."""

    header: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    lines: dict[str, str] = field(default_factory=dict)
    comments: dict[str, list[str]] = field(default_factory=dict)
    trailing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_series(path: Path) -> Series:
    """Parse a series file; a missing file is an empty series.

    Lines are patch file names; ``#`` starts a comment (whole-line or after
    whitespace).  Comment lines right above an entry stay attached to it; the
    header is everything up to the last blank line before the first entry.
    """
    series = Series()
    if not path.exists():
        return series
    pending: list[str] = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        name = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not name:
            pending.append(raw)
            continue
        if not series.entries:
            # Header: up to the last blank line before the first entry; the
            # comment block right above the first entry belongs to it.
            blanks = [i for i, line in enumerate(pending) if not line.strip()]
            cut = blanks[-1] + 1 if blanks else len(pending)
            series.header, pending = pending[:cut], pending[cut:]
        if "/" in name or not name.endswith(".patch") or " " in name:
            series.problems.append(
                f"{path.name}:{lineno}: {name!r} is not a plain '*.patch' file name"
            )
            continue
        if name in series.lines:
            series.problems.append(f"{path.name}:{lineno}: {name} is listed twice")
            continue
        series.entries.append(name)
        series.lines[name] = raw
        series.comments[name], pending = pending, []
    if series.entries:
        series.trailing = pending
    else:
        series.header = pending
    return series


def render_series(names: Sequence[str], old: Series) -> str:
    """Return the text of a series listing ``names``, keeping ``old``'s comments."""
    out: list[str] = []
    header = old.header if any(line.strip() for line in old.header) else SERIES_HEADER.splitlines()
    out.extend(header)
    for name in names:
        out.extend(old.comments.get(name, []))
        out.append(old.lines.get(name, name))
    out.extend(old.trailing)
    return "\n".join(out) + "\n"


def patch_name(subject: str) -> str:
    """Return the file name for a commit subject.

    Lowercase, every run of non-alphanumerics becomes ``_``, at most 60
    characters, ``.patch`` appended; never numbered.

    >>> patch_name("[Core] Token-granular KV cache: allocator hook")
    'core_token_granular_kv_cache_allocator_hook.patch'
    """
    slug = re.sub(r"[^a-z0-9]+", "_", subject.lower()).strip("_")
    slug = slug[:SUBJECT_MAX].rstrip("_") or "patch"
    return f"{slug}.patch"


def patches_dir_default() -> Path:
    """Return the patch folder (``PROXIMA_PATCHES_DIR`` or ``patches/vllm``)."""
    env = os.environ.get(PATCHES_ENV)
    return Path(env) if env else DEFAULT_PATCHES


def listed_patches(patches_dir: Path) -> list[Path]:
    """Return the patch files of the series in apply order.

    Raises:
        SeriesError: If the series file is malformed or lists a missing file.
    """
    series = read_series(patches_dir / SERIES_FILE)
    if series.problems:
        raise SeriesError("bad series file:\n  " + "\n  ".join(series.problems))
    missing = [n for n in series.entries if not (patches_dir / n).is_file()]
    if missing:
        raise SeriesError(f"series lists missing file(s) in {patches_dir}: {', '.join(missing)}")
    return [patches_dir / n for n in series.entries]
