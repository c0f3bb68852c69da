"""Validation of a written wheel: zip structure, and every member's RECORD hash and size."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from proxima_tools.wheels.common import BuildError
from proxima_tools.wheels.zipwriter import parse_record, raw_member_chunks


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
