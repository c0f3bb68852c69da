"""The bundle's files: the glibc floor of its wheels, the wheels' tar in parts, SHA256SUMS."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable
from pathlib import Path

from proxima_tools.bundle.common import CHUNK, sha256_of


def glibc_floor(filenames: Iterable[str]) -> str:
    """The highest glibc any of the wheels needs (from its manylinux platform tags; 2.5 if none)."""
    best = (2, 5)
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for name in filenames:
        plat = name[:-4].rsplit("-", 1)[-1]
        needs = []
        for tag in plat.split("."):
            if m := re.match(r"manylinux_(\d+)_(\d+)_", tag):
                needs.append((int(m.group(1)), int(m.group(2))))
            elif (key := tag.split("_", 1)[0]) in legacy:
                needs.append(legacy[key])
        if needs:  # a file with several tags runs where the least demanding one does
            best = max(best, min(needs))
    return f"{best[0]}.{best[1]}"


def split_file(path: Path, size: int) -> list[Path]:
    """Cut ``path`` into ``path.part-000``, ``-001``, … of at most ``size`` bytes each."""
    parts: list[Path] = []
    with path.open("rb") as src:
        while True:
            part = path.with_name(f"{path.name}.part-{len(parts):03d}")
            written = 0
            with part.open("wb") as dst:
                while written < size and (block := src.read(min(CHUNK, size - written))):
                    dst.write(block)
                    written += len(block)
            if written == 0:
                part.unlink()
                break
            parts.append(part)
    path.unlink()
    return parts


def make_tar(src_dir: Path, out: Path) -> None:
    """An uncompressed, reproducible tar of ``src_dir`` (wheels are compressed already)."""

    def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = 0
        ti.mode = 0o755 if ti.isdir() else 0o644
        return ti

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(src_dir, arcname=src_dir.name, recursive=False, filter=norm)
        for f in sorted(src_dir.iterdir()):
            tf.add(f, arcname=f"{src_dir.name}/{f.name}", filter=norm)


def write_sha256sums(bundle: Path) -> None:
    """``SHA256SUMS`` of every file in ``bundle``; replaced, never rewritten in place (a copy of a
    bundle made of hard links must not change the original)."""
    skip = ("SHA256SUMS", ".SHA256SUMS.partial")
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and p.name not in skip)
    lines = [f"{sha256_of(p)}  {p.relative_to(bundle).as_posix()}\n" for p in files]
    tmp = bundle / ".SHA256SUMS.partial"
    tmp.write_text("".join(lines))
    tmp.replace(bundle / "SHA256SUMS")
