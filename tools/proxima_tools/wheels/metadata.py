"""Wheel names and versions, and the ``.dist-info`` files rewritten for ``vllm`` +proxima:
``METADATA``, ``entry_points.txt`` and ``WHEEL``."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proxima_tools.wheels.common import (
    CPU_DROPPED_REQUIREMENTS,
    DIST_NAME,
    BuildError,
    Variant,
    log,
)


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
