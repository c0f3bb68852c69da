"""``check``: the proof that importing the series and exporting it again reproduces the committed
files byte for byte (CI runs it)."""

from __future__ import annotations

import difflib
import shutil
import tempfile
from pathlib import Path

from proxima_tools.series.common import SERIES_FILE, SeriesError, base_tag
from proxima_tools.series.export import export_series
from proxima_tools.series.patchfile import parse_patch
from proxima_tools.series.seriesfile import patch_name, read_series
from proxima_tools.series.tree import import_series


def _file_diff(expected: Path, actual: Path, label: str, limit: int = 60) -> str:
    old = (
        expected.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        if expected.exists()
        else []
    )
    new = (
        actual.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        if actual.exists()
        else []
    )
    diff = list(
        difflib.unified_diff(old, new, f"a/{label} (committed)", f"b/{label} (re-exported)")
    )
    more = f"... ({len(diff) - limit} more diff lines)\n" if len(diff) > limit else ""
    return "".join(diff[:limit]) + more


def check_series(
    patches_dir: Path, *, source: Path | None, version: str, round_trip: bool = True
) -> list[str]:
    """Check the series; return a list of problems (empty means all good).

    Checks: the series file parses; every listed file exists and every
    ``*.patch`` is listed; every patch has the required trailers; and an
    import/export round trip reproduces ``patches_dir`` byte for byte.
    """
    problems: list[str] = []
    series = read_series(patches_dir / SERIES_FILE)
    if not (patches_dir / SERIES_FILE).exists():
        problems.append(
            f"{patches_dir / SERIES_FILE} does not exist (an empty series still needs the file)"
        )
    problems.extend(series.problems)
    listed = set(series.entries)
    missing = [n for n in series.entries if not (patches_dir / n).is_file()]
    problems.extend(f"series lists {n}, but there is no such file" for n in missing)
    present = sorted(p.name for p in patches_dir.glob("*.patch")) if patches_dir.is_dir() else []
    problems.extend(f"{n} is not listed in series" for n in present if n not in listed)
    for name in series.entries:
        if name in missing:
            continue
        info = parse_patch(patches_dir / name)
        problems.extend(f"{name}: {p}" for p in info.problems)
        if info.subject and patch_name(info.subject) != name:
            problems.append(
                f"{name}: named {name} but its subject gives {patch_name(info.subject)}"
            )
    if not round_trip or missing or series.problems:
        return problems
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "patches"
        out.mkdir()
        if (patches_dir / SERIES_FILE).exists():
            shutil.copyfile(patches_dir / SERIES_FILE, out / SERIES_FILE)
        try:
            assert source is not None
            import_series(src, patches_dir=patches_dir, source=source, version=version)
            names = export_series(src, out, base_tag(version), quiet=True)
        except SeriesError as exc:
            problems.append(f"round trip failed: {exc}")
            return problems
        for name in [SERIES_FILE, *names]:
            if (
                not (patches_dir / name).exists()
                or (patches_dir / name).read_bytes() != (out / name).read_bytes()
            ):
                problems.append(
                    f"{name} differs from what import+export produces (run import, then export):\n"
                    + _file_diff(patches_dir / name, out / name, name)
                )
    return problems
