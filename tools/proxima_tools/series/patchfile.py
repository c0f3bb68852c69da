"""Reading one ``git format-patch`` file: its why-trailers and the files it changes."""

from __future__ import annotations

import datetime as dt
import email.header
import re
from dataclasses import dataclass
from pathlib import Path

from proxima_tools.series.common import REQUIRED_TRAILERS


@dataclass
class FileChange:
    """One file touched by a patch: status A/M/D, path and (for renames) old path."""

    status: str
    path: str
    old_path: str | None = None


@dataclass
class PatchInfo:
    """What ``check`` and ``changed-files`` need to know about a patch file."""

    name: str
    subject: str
    author: str
    date: str
    message: str
    trailers: dict[str, str]
    problems: list[str]
    changes: list[FileChange]


_TRAILER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")


_UPSTREAMABLE_RE = re.compile(r"(?i)(yes|no|partly|partially)\b")


def parse_trailers(message: str) -> tuple[dict[str, str], list[str]]:
    """Extract the required DEP-3-like trailers from a commit message.

    A trailer is ``Key: value`` at the start of a line; its value continues on
    following non-blank lines that do not start another ``Key:``.  Keys are
    matched case-insensitively.

    Returns:
        The trailers found (canonical key -> value) and problems (missing,
        empty, TODO placeholders, malformed values, duplicates).
    """
    wanted = {k.lower(): k for k in REQUIRED_TRAILERS}
    found: dict[str, str] = {}
    problems: list[str] = []
    current: str | None = None
    for line in message.splitlines():
        match = _TRAILER_RE.match(line)
        if match and match.group(1).lower() in wanted:
            current = wanted[match.group(1).lower()]
            if current in found:
                problems.append(f"trailer {current}: appears more than once")
            found[current] = match.group(2).strip()
        elif match or not line.strip():
            current = None
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    for key in REQUIRED_TRAILERS:
        value = found.get(key)
        if value is None:
            problems.append(f"missing trailer {key}:")
        elif not value:
            problems.append(f"trailer {key}: is empty")
        elif value.upper().startswith("TODO"):
            problems.append(f"trailer {key}: is still a TODO placeholder")
    upstreamable = found.get("Upstreamable", "")
    if (
        upstreamable
        and not _UPSTREAMABLE_RE.match(upstreamable)
        and not upstreamable.upper().startswith("TODO")
    ):
        problems.append("trailer Upstreamable: must start with 'yes', 'no' or 'partly' (then why)")
    last = found.get("Last-Update", "")
    if last and not last.upper().startswith("TODO"):
        try:
            dt.date.fromisoformat(last)
        except ValueError:
            problems.append(f"trailer Last-Update: {last!r} is not a YYYY-MM-DD date")
    return found, problems


def _decode_header(value: str) -> str:
    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except (ValueError, LookupError):
        return value


def _unquote_path(path: str) -> str:
    """Undo git's C-style quoting of a path (``"a/sp\\303\\251cial"``)."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    body = path[1:-1]
    out = bytearray()
    i = 0
    escapes = {"n": 10, "t": 9, '"': 34, "\\": 92, "a": 7, "b": 8, "f": 12, "r": 13, "v": 11}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(escapes.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(ch.encode("utf-8"))
        i += 1
    return out.decode("utf-8", "replace")


def _strip_prefix(path: str) -> str | None:
    path = _unquote_path(path.split("\t")[0].rstrip())
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_changes(diff_text: str) -> list[FileChange]:
    """List the files a (format-patch) diff touches, from its headers only."""
    changes: list[FileChange] = []
    block: list[str] | None = None

    def finish(lines: list[str]) -> None:
        first = lines[0][len("diff --git ") :]
        old = new = None
        status = "M"
        rename_from = rename_to = None
        for line in lines[1:]:
            if line.startswith("new file mode"):
                status = "A"
            elif line.startswith("deleted file mode"):
                status = "D"
            elif line.startswith(("rename from ", "copy from ")):
                rename_from = _unquote_path(line.split(" ", 2)[2])
            elif line.startswith(("rename to ", "copy to ")):
                rename_to = _unquote_path(line.split(" ", 2)[2])
            elif line.startswith("--- "):
                old = _strip_prefix(line[4:])
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:])
        if rename_from and rename_to:
            changes.append(FileChange("R", rename_to, rename_from))
            return
        path = new or old
        if path is None:  # binary or mode-only change: names come from the diff line
            size = (len(first) - 5) // 2
            candidate = first[2 : 2 + size]
            if first == f"a/{candidate} b/{candidate}":
                path = candidate
            else:
                parts = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', first)
                path = _strip_prefix(parts[-1]) or ""
        changes.append(FileChange(status, path))

    for line in diff_text.splitlines():
        if line.startswith("diff --git "):
            if block:
                finish(block)
            block = [line]
        elif block is not None:
            if line.startswith("@@") or line.startswith("GIT binary patch"):
                finish(block)
                block = None
            else:
                block.append(line)
    if block:
        finish(block)
    return changes


def parse_patch(path: Path) -> PatchInfo:
    """Parse a ``git format-patch`` file: headers, message, trailers, files."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    headers: dict[str, str] = {}
    i = 0
    if lines and lines[0].startswith("From "):
        i = 1
    last_key: str | None = None
    while i < len(lines) and lines[i].strip():
        line = lines[i]
        if line[:1] in (" ", "\t") and last_key:
            headers[last_key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            last_key = key.strip().lower()
            headers[last_key] = value.strip()
        i += 1
    body: list[str] = []
    for line in lines[i + 1 :]:
        if line == "---" or line.startswith("diff --git "):
            break
        body.append(line)
    diff_start = text.find("\ndiff --git ")
    diff_text = text[diff_start + 1 :] if diff_start >= 0 else ""
    subject = _decode_header(headers.get("subject", ""))
    message = "\n".join(body).strip("\n")
    trailers, problems = parse_trailers(message)
    if not subject:
        problems.insert(0, "no Subject: header (is this a git format-patch file?)")
    changes = parse_changes(diff_text)
    if not changes:
        problems.append("contains no diff")
    return PatchInfo(
        name=path.name,
        subject=subject,
        author=_decode_header(headers.get("from", "")),
        date=headers.get("date", ""),
        message=message,
        trailers=trailers,
        problems=problems,
        changes=changes,
    )
