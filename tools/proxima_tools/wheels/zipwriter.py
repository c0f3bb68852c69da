"""A deterministic zip writer: fixed timestamps and modes, members copied with their compressed
bytes, and the wheel RECORD's hash and row format."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import struct
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from proxima_tools.wheels.common import BuildError

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
