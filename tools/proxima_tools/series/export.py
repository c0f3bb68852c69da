"""Writing the series: ``export`` (the patched tree's commits back to patch files and the
``series`` order) and ``new`` (commit the tree's changes as a new patch with its why-trailers)."""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

from proxima_tools.series.common import (
    FORMAT_PATCH_OPTIONS,
    REQUIRED_TRAILERS,
    SERIES_FILE,
    SeriesError,
    git,
    log,
)
from proxima_tools.series.patchfile import parse_patch
from proxima_tools.series.seriesfile import patch_name, read_series, render_series


def export_series(src: Path, patches_dir: Path, tag: str, *, quiet: bool = False) -> list[str]:
    """Write ``tag..HEAD`` of ``src`` as patch files into ``patches_dir``.

    Files are named after commit subjects, ``series`` is rewritten (keeping its
    comments) and ``*.patch`` files no longer in the series are deleted.  The
    output depends only on the commits, so exporting twice gives identical bytes.

    Returns:
        The patch names in order.

    Raises:
        SeriesError: Missing tag, merges, empty commits or clashing names.
    """
    if not (src / ".git").exists():
        raise SeriesError(f"{src} is not a git work tree; run `proxima_tools.series import` first")
    if (
        git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", cwd=src, check=False).returncode
        != 0
    ):
        raise SeriesError(f"{src} has no tag {tag}; was it imported for another upstream version?")
    if git("merge-base", "--is-ancestor", tag, "HEAD", cwd=src, check=False).returncode != 0:
        raise SeriesError(f"HEAD of {src} does not descend from {tag}")
    if git("rev-list", "--merges", f"{tag}..HEAD", cwd=src).stdout.strip():
        raise SeriesError(f"{tag}..HEAD contains merge commits; rebase to a linear history first")
    commits = git("rev-list", "--reverse", f"{tag}..HEAD", cwd=src).stdout.split()
    subjects = git("log", "--reverse", "-z", "--format=%s", f"{tag}..HEAD", cwd=src).stdout.split(
        "\0"
    )
    subjects = [s for s in subjects if s]
    if len(subjects) != len(commits):
        raise SeriesError("could not read the commit subjects")
    names = [patch_name(s) for s in subjects]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise SeriesError(
            f"several commits map to the same patch name: {', '.join(clashes)}; "
            "reword their subjects"
        )
    for commit, subject in zip(commits, subjects, strict=True):
        if git("diff", "--quiet", f"{commit}^", commit, cwd=src, check=False).returncode == 0:
            raise SeriesError(f"commit {commit[:12]} ({subject!r}) changes nothing; drop it")
    if not quiet and git("status", "--porcelain", "--untracked-files=no", cwd=src).stdout.strip():
        log(f"warning: {src} has uncommitted changes; they are NOT exported (commit them first)")
    patches_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="series-fp-") as tmp:
        if commits:
            git(
                "format-patch",
                *FORMAT_PATCH_OPTIONS,
                "--numbered-files",
                "-o",
                tmp,
                f"{tag}..HEAD",
                cwd=src,
            )
        produced = sorted(Path(tmp).iterdir(), key=lambda p: int(p.name))
        if len(produced) != len(commits):
            raise SeriesError(
                f"git format-patch wrote {len(produced)} files for {len(commits)} commits"
            )
        for name, subject, produced_file in zip(names, subjects, produced, strict=True):
            data = produced_file.read_bytes()
            target = patches_dir / name
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
                if not quiet:
                    log(f"wrote {name}")
            if not quiet:
                problems = parse_patch(target).problems
                if problems:
                    log(f"warning: {name} ({subject}): " + "; ".join(problems))
    series_path = patches_dir / SERIES_FILE
    text = render_series(names, read_series(series_path))
    if not series_path.exists() or series_path.read_text(encoding="utf-8") != text:
        series_path.write_text(text, encoding="utf-8")
    for stale in sorted(patches_dir.glob("*.patch")):
        if stale.name not in names:
            stale.unlink()
            if not quiet:
                log(f"deleted {stale.name} (no longer in the series)")
    if not quiet:
        log(f"exported {len(names)} patch(es) to {patches_dir}")
    return names


def new_patch(src: Path, subject: str, trailers: dict[str, str], *, stage_all: bool) -> str:
    """Commit the changes in the import tree as a new patch with a trailer template.

    Trailers not given are written as ``TODO`` placeholders, which ``check``
    rejects until they are filled in (``git commit --amend``).

    Returns:
        The patch file name the commit will export to.
    """
    if not (src / ".git").exists():
        raise SeriesError(f"{src} is not a git work tree; run `proxima_tools.series import` first")
    if "\n" in subject.strip() or not subject.strip():
        raise SeriesError("the subject must be one non-empty line")
    if stage_all:
        git("add", "--all", cwd=src, isolated=False)
    if git("diff", "--cached", "--quiet", cwd=src, check=False, isolated=False).returncode == 0:
        raise SeriesError(f"nothing staged in {src}; `git add` your changes or pass --all")
    today = dt.date.today().isoformat()
    values = {key: trailers.get(key) or "TODO" for key in REQUIRED_TRAILERS}
    if not trailers.get("Last-Update"):
        values["Last-Update"] = today
    body = "\n".join(f"{key}: {values[key]}" for key in REQUIRED_TRAILERS)
    message = f"{subject.strip()}\n\n{body}\n"
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-F",
        "-",
        cwd=src,
        isolated=False,
        stdin=message.encode(),
    )
    name = patch_name(subject)
    todo = [k for k, v in values.items() if v == "TODO"]
    if todo:
        log(f"fill in {', '.join(todo)} with `git -C {src} commit --amend` before exporting")
    return name
