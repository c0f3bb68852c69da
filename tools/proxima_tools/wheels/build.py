"""One wheel from one upstream wheel: check the overlay against upstream's bytes, plan the members
and the new ``.dist-info``, write, validate and move it into place."""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from proxima_tools.wheels.common import (
    DIST_NAME,
    KNOWN_DIFFERING_WHY,
    PACKAGE_NAME,
    PROVENANCE_FILE,
    SIGNATURE_FILES,
    BuildError,
    Variant,
    log,
)
from proxima_tools.wheels.metadata import (
    MetadataContext,
    WheelName,
    _field_key,
    _field_value,
    _split_metadata,
    merge_entry_points,
    parse_wheel_name,
    render_wheel_file,
    rewrite_metadata,
    wheel_version,
)
from proxima_tools.wheels.overlay import Overlay
from proxima_tools.wheels.verify import member_content_hash, validate_wheel
from proxima_tools.wheels.zipwriter import (
    FILE_MODE,
    HashingWriter,
    ZipEntry,
    ZipWriter,
    fixed_timestamp,
    parse_record,
    raw_member_chunks,
    record_hash,
    render_record,
)


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
            f"upstream wheel {path} not found (fetch it with proxima_tools.upstream "
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


def member_order(names: Iterable[str], dist_info: str) -> list[str]:
    """Sorted, with the .dist-info last and RECORD the very last member."""
    record = f"{dist_info}/RECORD"

    def key(name: str) -> tuple[int, str]:
        if name == record:
            return (2, name)
        return (1 if name.startswith(dist_info + "/") else 0, name)

    return sorted(names, key=key)


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
