"""Tests for proxima_tools.series: import/export round trips, check, apply, changed-files.

A small synthetic upstream (a fake ``vllm/`` package in a temp dir) keeps these
fast and offline; one test runs ``check`` on the real sdist when it is cached.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxima_tools import series, upstream
from tests.tools.utils import tool_cmd

REPO_ROOT = Path(__file__).resolve().parents[2]

VERSION = "0.26.0"
TAG = f"upstream-{VERSION}"
TRAILERS = (
    "Why: the scheduler needs a hook here so that token-granular KV\n"
    "management can replace block allocation.\n"
    "Upstreamable: yes; a generic hook is useful to others.\n"
    "Removal: when upstream grows an allocator hook.\n"
    "Origin: proxima\n"
    "Forwarded: no\n"
    "Last-Update: 2026-01-02\n"
)
CORE = "".join(f"line {i}\n" for i in range(1, 41))


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits made by the tests themselves get a fixed identity and date."""
    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{var}_NAME", "Test Dev")
        monkeypatch.setenv(f"GIT_{var}_EMAIL", "dev@example.invalid")
        monkeypatch.setenv(f"GIT_{var}_DATE", "2026-01-02T03:04:05+0000")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def upstream_src(tmp_path: Path) -> Path:
    """A fake upstream source folder holding ``vllm/``."""
    root = tmp_path / "upstream"
    pkg = root / "vllm"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.26.0"\n')
    (pkg / "core.py").write_text(CORE)
    (pkg / "sub" / "mod.py").write_text("def f():\n    return 1\n")
    (pkg / "old.py").write_text("OLD = True\n")
    tool = pkg / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    return root


@pytest.fixture
def patches_dir(tmp_path: Path) -> Path:
    """An empty series."""
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "series").write_text(series.SERIES_HEADER)
    return pdir


def commit(tree: Path, subject: str, body: str = TRAILERS) -> None:
    """Commit everything in ``tree`` with the test identity."""
    subprocess.run(["git", "add", "--all"], cwd=tree, check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"{subject}\n\n{body}"], cwd=tree, check=True)


def make_two_patches(src: Path) -> None:
    """Edit an imported tree: a modification + new file, then a deletion."""
    core = src / "vllm" / "core.py"
    core.write_text(core.read_text().replace("line 5\n", "line 5 (patched)\n"))
    (src / "vllm" / "added.py").write_text("NEW = 1\n")
    commit(src, "[Core] Token-granular hook: allocator")
    (src / "vllm" / "old.py").unlink()
    core.write_text(core.read_text().replace("line 30\n", "line 30 (second)\n"))
    commit(src, "Remove old module")


def files_of(path: Path) -> dict[str, bytes]:
    """Map file name -> bytes for a folder."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.fixture
def exported(tmp_path: Path, upstream_src: Path, patches_dir: Path) -> Iterator[Path]:
    """A patches folder holding two exported patches."""
    src = tmp_path / "src"
    series.import_series(src, patches_dir=patches_dir, source=upstream_src, version=VERSION)
    make_two_patches(src)
    series.export_series(src, patches_dir, TAG)
    yield patches_dir


# ------------------------------------------------------------------ pure helpers


def test_patch_name_is_subject_derived_and_bounded() -> None:
    assert (
        series.patch_name("[Core] Token-granular KV: allocator hook")
        == "core_token_granular_kv_allocator_hook.patch"
    )
    assert series.patch_name("!!!") == "patch.patch"
    long = series.patch_name("a very long subject " * 10)
    assert long.endswith(".patch") and len(long) <= 60 + len(".patch")
    assert not long[: -len(".patch")].endswith("_")


def test_series_file_keeps_comments_on_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "series"
    path.write_text("# header\n\n# about b\nb.patch\na.patch  # inline\n# trailing\n")
    parsed = series.read_series(path)
    assert parsed.entries == ["b.patch", "a.patch"]
    assert series.render_series(["a.patch", "c.patch", "b.patch"], parsed) == (
        "# header\n\na.patch  # inline\nc.patch\n# about b\nb.patch\n# trailing\n"
    )


def test_series_file_reports_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "series"
    path.write_text("a.patch\na.patch\nsub/b.patch\nnotes.txt\n")
    problems = series.read_series(path).problems
    assert len(problems) == 3
    assert any("listed twice" in p for p in problems)


def test_trailers_parsing_and_validation() -> None:
    found, problems = series.parse_trailers("Subject body\n\n" + TRAILERS)
    assert problems == []
    assert found["Why"].startswith("the scheduler needs a hook") and found["Why"].endswith(
        "block allocation."
    )
    _, problems = series.parse_trailers(
        TRAILERS.replace("Removal: when upstream grows an allocator hook.\n", "")
    )
    assert problems == ["missing trailer Removal:"]
    bad = TRAILERS.replace("Upstreamable: yes;", "Upstreamable: maybe;").replace(
        "2026-01-02", "soon"
    )
    bad = bad.replace("Forwarded: no", "Forwarded: TODO")
    _, problems = series.parse_trailers(bad)
    assert any("Upstreamable" in p for p in problems)
    assert any("Last-Update" in p and "YYYY-MM-DD" in p for p in problems)
    assert "trailer Forwarded: is still a TODO placeholder" in problems
    _, problems = series.parse_trailers(
        TRAILERS.replace("Upstreamable: yes", "Upstreamable: partly")
    )
    assert problems == []


# ---------------------------------------------------------------- import/export


def test_import_builds_deterministic_base_from_folder_or_tarball(
    tmp_path: Path, upstream_src: Path, patches_dir: Path
) -> None:
    tarball = tmp_path / "vllm-0.26.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(upstream_src / "vllm", arcname="vllm-0.26.0/vllm")
        tar.add(
            upstream_src / "vllm" / "core.py", arcname="vllm-0.26.0/setup.py"
        )  # outside vllm/: ignored
    a, b = tmp_path / "a", tmp_path / "b"
    assert (
        series.import_series(a, patches_dir=patches_dir, source=upstream_src, version=VERSION) == []
    )
    series.import_series(b, patches_dir=patches_dir, source=tarball, version=VERSION)
    rev = ["git", "rev-parse", TAG]
    assert subprocess.check_output(rev, cwd=a) == subprocess.check_output(rev, cwd=b)
    listing = subprocess.check_output(["git", "ls-tree", "-r", "HEAD"], cwd=a, text=True)
    assert "100755 blob" in next(
        line for line in listing.splitlines() if line.endswith("vllm/tool.sh")
    )
    assert "setup.py" not in listing


def test_round_trip_is_byte_identical(tmp_path: Path, upstream_src: Path, exported: Path) -> None:
    names = series.read_series(exported / "series").entries
    assert names == ["core_token_granular_hook_allocator.patch", "remove_old_module.patch"]
    first = files_of(exported)
    text = first[names[0]].decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [Core] Token-granular hook: allocator\n" in text
    assert "a/vllm/core.py" in text and "\n-- \n" not in text
    # Re-import the exported files and export again: same bytes.
    src2, out2 = tmp_path / "src2", tmp_path / "out2"
    out2.mkdir()
    shutil.copyfile(exported / "series", out2 / "series")
    assert (
        series.import_series(src2, patches_dir=exported, source=upstream_src, version=VERSION)
        == names
    )
    series.export_series(src2, out2, TAG, quiet=True)
    assert files_of(out2) == first
    assert series.check_series(exported, source=upstream_src, version=VERSION) == []


def test_import_is_deterministic(tmp_path: Path, upstream_src: Path, exported: Path) -> None:
    heads = []
    for name in ("x", "y"):
        dest = tmp_path / name
        series.import_series(dest, patches_dir=exported, source=upstream_src, version=VERSION)
        heads.append(subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=dest))
        again = tmp_path / f"{name}-out"
        series.export_series(dest, again, TAG, quiet=True)
        assert (
            files_of(again)["remove_old_module.patch"]
            == (exported / "remove_old_module.patch").read_bytes()
        )
    assert heads[0] == heads[1]


def test_export_renames_and_deletes_stale_patches(
    tmp_path: Path, upstream_src: Path, exported: Path
) -> None:
    src = tmp_path / "src3"
    series.import_series(src, patches_dir=exported, source=upstream_src, version=VERSION)
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD~1"], cwd=src, check=True)
    subprocess.run(
        ["git", "commit", "-q", "--amend", "-m", f"Renamed subject\n\n{TRAILERS}"],
        cwd=src,
        check=True,
    )
    names = series.export_series(src, exported, TAG)
    assert names == ["renamed_subject.patch"]
    assert sorted(p.name for p in exported.glob("*.patch")) == ["renamed_subject.patch"]
    assert series.read_series(exported / "series").entries == names
    assert (exported / "series").read_text().startswith("# Apply order")


def test_export_refuses_clashing_names(
    tmp_path: Path, upstream_src: Path, patches_dir: Path
) -> None:
    src = tmp_path / "src"
    series.import_series(src, patches_dir=patches_dir, source=upstream_src, version=VERSION)
    for n in (1, 2):
        (src / "vllm" / f"f{n}.py").write_text(f"{n}\n")
        commit(src, "Same: subject" if n == 1 else "same subject")
    with pytest.raises(series.SeriesError, match="same patch name"):
        series.export_series(src, patches_dir, TAG)


# ------------------------------------------------------------------------ check


def test_check_passes_on_empty_series(upstream_src: Path, patches_dir: Path) -> None:
    assert series.check_series(patches_dir, source=upstream_src, version=VERSION) == []


def test_check_needs_a_series_file(tmp_path: Path, upstream_src: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    problems = series.check_series(empty, source=upstream_src, version=VERSION)
    assert any("does not exist" in p for p in problems)


def test_check_reports_missing_trailer(
    tmp_path: Path, upstream_src: Path, patches_dir: Path
) -> None:
    src = tmp_path / "src"
    series.import_series(src, patches_dir=patches_dir, source=upstream_src, version=VERSION)
    (src / "vllm" / "core.py").write_text(CORE + "extra\n")
    commit(
        src,
        "No removal trailer",
        TRAILERS.replace("Removal: when upstream grows an allocator hook.\n", ""),
    )
    series.export_series(src, patches_dir, TAG)
    problems = series.check_series(patches_dir, source=upstream_src, version=VERSION)
    assert problems == ["no_removal_trailer.patch: missing trailer Removal:"]


def test_check_reports_unlisted_and_missing_files(upstream_src: Path, exported: Path) -> None:
    shutil.copyfile(exported / "remove_old_module.patch", exported / "stray.patch")
    (exported / "remove_old_module.patch").unlink()
    problems = series.check_series(exported, source=upstream_src, version=VERSION)
    assert "series lists remove_old_module.patch, but there is no such file" in problems
    assert "stray.patch is not listed in series" in problems


def test_check_reports_a_hand_edited_patch(upstream_src: Path, exported: Path) -> None:
    path = exported / "remove_old_module.patch"
    path.write_text(path.read_text() + "-- \n2.39.5\n\n")
    problems = series.check_series(exported, source=upstream_src, version=VERSION)
    assert len(problems) == 1
    assert problems[0].startswith(
        "remove_old_module.patch differs from what import+export produces"
    )
    assert "-2.39.5" in problems[0]


def test_check_reports_a_patch_that_does_not_apply(upstream_src: Path, exported: Path) -> None:
    (upstream_src / "vllm" / "core.py").write_text(CORE.replace("line 5\n", "line five\n"))
    problems = series.check_series(exported, source=upstream_src, version=VERSION)
    assert (
        len(problems) == 1
        and "core_token_granular_hook_allocator.patch does not apply" in problems[0]
    )


def test_cli_check_exit_codes(tmp_path: Path, upstream_src: Path, exported: Path) -> None:
    lock = tmp_path / "fake.lock"
    lock.write_text(
        'schema = 1\n[upstream]\nversion = "0.26.0"\n[artifacts.sdist]\nproject = "vllm"\n'
        f'filename = "vllm-0.26.0.tar.gz"\nsha256 = "{"0" * 64}"\n'
    )
    cmd = [*tool_cmd("series"), "--lock", str(lock),
           "--patches-dir", str(exported), "--upstream", str(upstream_src), "check"]  # fmt: skip
    ok = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "series check ok: 2 patch(es)" in ok.stderr
    (exported / "series").write_text(
        series.SERIES_HEADER + "core_token_granular_hook_allocator.patch\n"
    )
    bad = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "remove_old_module.patch is not listed in series" in bad.stderr


def test_cli_uses_the_sdist_named_by_the_given_lock(
    tmp_path: Path, upstream_src: Path, patches_dir: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    tarball = cache / "vllm-9.9.9.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(upstream_src / "vllm", arcname="vllm-9.9.9/vllm")
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    lock = tmp_path / "fake.lock"
    lock.write_text(
        'schema = 1\n[upstream]\nversion = "9.9.9"\n[artifacts.sdist]\nproject = "vllm"\n'
        f'filename = "vllm-9.9.9.tar.gz"\nsha256 = "{sha}"\n'
    )
    env = {**os.environ, "PROXIMA_UPSTREAM_CACHE": str(cache), "PROXIMA_UPSTREAM_SEED": ""}
    common = [*tool_cmd("series"), "--lock", str(lock), "--patches-dir", str(patches_dir)]
    dest = tmp_path / "src"
    run = subprocess.run(
        [*common, "--offline", "import", "--dest", str(dest)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "tagged upstream-9.9.9" in run.stderr and str(tarball) in run.stderr
    run = subprocess.run([*common, "--offline", "check"], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# ----------------------------------------------------------------- import guard


def test_import_refuses_to_discard_work(tmp_path: Path, upstream_src: Path, exported: Path) -> None:
    src = tmp_path / "work"
    series.import_series(src, patches_dir=exported, source=upstream_src, version=VERSION)
    series.import_series(
        src, patches_dir=exported, source=upstream_src, version=VERSION
    )  # nothing to lose
    (src / "vllm" / "core.py").write_text("edited\n")
    with pytest.raises(series.SeriesError, match="uncommitted changes"):
        series.import_series(src, patches_dir=exported, source=upstream_src, version=VERSION)
    commit(src, "Unexported change")
    with pytest.raises(series.SeriesError, match="commit not in .*unexported_change.patch"):
        series.import_series(src, patches_dir=exported, source=upstream_src, version=VERSION)
    series.import_series(
        src, patches_dir=exported, source=upstream_src, version=VERSION, force=True
    )
    assert subprocess.check_output(["git", "status", "--porcelain"], cwd=src) == b""
    other = tmp_path / "not-git"
    other.mkdir()
    (other / "file").write_text("x")
    with pytest.raises(series.SeriesError, match="not a git work tree"):
        series.import_series(other, patches_dir=exported, source=upstream_src, version=VERSION)


def test_new_patch_writes_trailer_template(
    tmp_path: Path, upstream_src: Path, patches_dir: Path
) -> None:
    src = tmp_path / "src"
    series.import_series(src, patches_dir=patches_dir, source=upstream_src, version=VERSION)
    with pytest.raises(series.SeriesError, match="nothing staged"):
        series.new_patch(src, "Empty", {}, stage_all=True)
    (src / "vllm" / "sub" / "mod.py").write_text("def f():\n    return 2\n")
    name = series.new_patch(
        src, "Sub: return two", {"Why": "tests need it.", "Origin": "proxima"}, stage_all=True
    )
    assert name == "sub_return_two.patch"
    message = subprocess.check_output(["git", "log", "-1", "--format=%B"], cwd=src, text=True)
    assert "Why: tests need it.\nUpstreamable: TODO\n" in message
    series.export_series(src, patches_dir, TAG)
    problems = series.check_series(patches_dir, source=upstream_src, version=VERSION)
    assert "sub_return_two.patch: trailer Removal: is still a TODO placeholder" in problems


# ------------------------------------------------------------ apply / changed


def test_changed_files_lists_status(exported: Path) -> None:
    files = series.changed_files(exported)
    assert {k: v.status for k, v in files.items()} == {
        "vllm/added.py": "A",
        "vllm/core.py": "M",
        "vllm/old.py": "D",
    }
    assert files["vllm/core.py"].patches == [
        "core_token_granular_hook_allocator.patch",
        "remove_old_module.patch",
    ]


def test_parse_changes_handles_quoted_and_binary_paths() -> None:
    diff = (
        'diff --git "a/vllm/sp ace\\303\\251.py" "b/vllm/sp ace\\303\\251.py"\n'
        "new file mode 100644\n"
        "index 0000000..1111111\n"
        "--- /dev/null\n"
        '+++ "b/vllm/sp ace\\303\\251.py"\n'
        "@@ -0,0 +1 @@\n+x\n"
        "diff --git a/vllm/blob.bin b/vllm/blob.bin\n"
        "index 1111111..2222222 100644\n"
        "GIT binary patch\nliteral 1\n"
    )
    changes = series.parse_changes(diff)
    assert [(c.status, c.path) for c in changes] == [
        ("A", "vllm/sp aceé.py"),
        ("M", "vllm/blob.bin"),
    ]


def test_apply_to_target_inside_a_git_repo(
    tmp_path: Path, upstream_src: Path, exported: Path
) -> None:
    outer = tmp_path / "outer"
    target = outer / "build" / "wheel"
    target.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True)
    shutil.copytree(upstream_src / "vllm", target / "vllm")
    assert series.apply_to_target(exported, target, check_only=True) == [
        "core_token_granular_hook_allocator.patch",
        "remove_old_module.patch",
    ]
    assert not (target / "vllm" / "added.py").exists()
    series.apply_to_target(exported, target)
    core = (target / "vllm" / "core.py").read_text()
    assert "line 5 (patched)" in core and "line 30 (second)" in core
    assert (target / "vllm" / "added.py").exists() and not (target / "vllm" / "old.py").exists()
    assert series.apply_to_target(exported, target) == []  # already applied: left alone


def test_apply_to_target_is_all_or_nothing(
    tmp_path: Path, upstream_src: Path, exported: Path
) -> None:
    target = tmp_path / "wheel"
    shutil.copytree(upstream_src / "vllm", target / "vllm")
    (target / "vllm" / "core.py").write_text(CORE.replace("line 30\n", "line thirty\n"))
    with pytest.raises(series.SeriesError, match="first failing patch: remove_old_module.patch"):
        series.apply_to_target(exported, target)
    assert not (target / "vllm" / "added.py").exists()  # the first patch was not applied either
    assert (target / "vllm" / "old.py").exists()
    with pytest.raises(series.SeriesError, match="no vllm/ folder"):
        series.apply_to_target(exported, tmp_path)


# ------------------------------------------------------------------ real sdist


def test_check_passes_on_the_real_sdist_and_series() -> None:
    try:
        sdist = upstream.fetch_artifact("sdist", offline=True)
    except upstream.UpstreamError as exc:
        pytest.skip(f"the pinned sdist is not cached: {exc}")
    problems = series.check_series(REPO_ROOT / "patches" / "vllm", source=sdist, version=VERSION)
    assert problems == []


# ---------------------------------------------------- the next release's series

NEXT_LOCKS = sorted((REPO_ROOT / "patches" / "next").glob("vllm-*.lock"))


@pytest.mark.parametrize("lock", NEXT_LOCKS, ids=lambda p: p.stem)
def test_next_series_carries_every_patch_of_the_pin(lock: Path) -> None:
    """A patch added to (or dropped from) the pin's series must be rebased onto the next
    release too: the two series list the same patches, in the same order (names are made
    from subjects)."""
    pin = series.read_series(REPO_ROOT / "patches" / "vllm" / "series").entries
    nxt = series.read_series(lock.with_suffix("") / "series").entries
    assert nxt == pin
    version = upstream.upstream_version(upstream.load_lock(lock))
    assert lock.stem == f"vllm-{version}"


@pytest.mark.parametrize("lock", NEXT_LOCKS, ids=lambda p: p.stem)
def test_next_series_round_trips_on_its_sdist(lock: Path) -> None:
    """The rebased series applies to its release's sdist and exports back byte for byte."""
    upstream_lock = upstream.load_lock(lock)
    try:
        sdist = upstream.fetch_artifact("sdist", lock=upstream_lock, offline=True)
    except upstream.UpstreamError as exc:
        pytest.skip(
            f"{lock.stem}'s sdist is not cached (scripts/next_upstream.sh fetches it): {exc}"
        )
    version = upstream.upstream_version(upstream_lock)
    problems = series.check_series(lock.with_suffix(""), source=sdist, version=version)
    assert problems == []
