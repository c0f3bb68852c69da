"""Upstream's tests in the pinned sdist: where they are, and the smallest set of files a suite
needs (its imports, conftests and data)."""

from __future__ import annotations

import ast
import tarfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from proxima_tools import upstream
from proxima_tools.upstream_tests.common import EXTRACTED_SEED


class TestsSource:
    """The files under ``tests/`` of the pinned sdist, from its tarball or an extracted tree."""

    def __init__(self, files: dict[str, bytes], origin: str, pyproject: bytes = b"") -> None:
        self.files = files  # "tests/..." -> bytes
        self.origin = origin
        self.pyproject = pyproject  # the sdist's pyproject.toml (its pytest settings)

    @classmethod
    def locate(cls) -> TestsSource | None:
        """Find the pinned sdist's tests without touching the network, or None.

        The sdist in ``.cache/upstream`` (or a seed folder), its sha256 checked against
        ``upstream.lock``, else a tree extracted from it under ``.cache/dl/src``.
        """
        art = upstream.get_artifact("sdist")
        for folder in (upstream.default_dest(), *upstream.seed_dirs()):
            tarball = folder / art.filename
            if tarball.is_file():
                upstream.verify_file(tarball, art.sha256, quick=True)
                return cls.from_tarball(tarball)
        tree = EXTRACTED_SEED / f"vllm-{art.version}" / "tests"
        if (tree / "conftest.py").is_file():
            files = {
                "tests/" + p.relative_to(tree).as_posix(): p.read_bytes()
                for p in sorted(tree.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts
            }
            pyproject = tree.parent / "pyproject.toml"
            return cls(files, str(tree), pyproject.read_bytes() if pyproject.is_file() else b"")
        return None

    @classmethod
    def from_tarball(cls, tarball: Path) -> TestsSource:
        prefix = None
        files: dict[str, bytes] = {}
        pyproject = b""
        with tarfile.open(tarball) as tar:
            for member in tar:
                top, _, rest = member.name.partition("/")
                prefix = prefix or top
                if not member.isfile() or top != prefix:
                    continue
                if rest.startswith("tests/") or rest == "pyproject.toml":
                    handle = tar.extractfile(member)
                    data = handle.read() if handle is not None else b""
                    if rest == "pyproject.toml":
                        pyproject = data
                    else:
                        files[rest] = data
        return cls(files, str(tarball), pyproject)

    def has_module(self, dotted: str) -> str | None:
        """The file that defines module ``dotted`` (``tests.x.y``), if it is in the sdist."""
        base = dotted.replace(".", "/")
        for candidate in (f"{base}/__init__.py", f"{base}.py"):
            if candidate in self.files:
                return candidate
        return None


def _imported_modules(path: str, source: bytes) -> Iterator[str]:
    """Every module name (and ``from m import name`` candidate) that ``path`` imports."""
    package = path.removesuffix(".py").split("/")
    package = package[:-1] if package[-1] != "__init__" else package[:-1]
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def minimal_file_set(source: TestsSource, suite: Sequence[str]) -> list[str]:
    """The suite's files plus what they need: conftest files, packages and ``tests.*`` imports."""
    wanted: set[str] = set()
    todo: list[str] = []
    for entry in suite:
        entry = entry.rstrip("/")
        todo += [p for p in source.files if p == entry or p.startswith(entry + "/")]
        # conftest.py files of every folder above the suite (pytest loads them).
        parts = entry.split("/")
        todo += [
            f"{'/'.join(parts[:i])}/conftest.py"
            for i in range(1, len(parts) + 1)
            if f"{'/'.join(parts[:i])}/conftest.py" in source.files
        ]
    while todo:
        path = todo.pop()
        if path in wanted:
            continue
        wanted.add(path)
        parts = path.split("/")
        todo += [
            f"{'/'.join(parts[:i])}/__init__.py"
            for i in range(1, len(parts))
            if f"{'/'.join(parts[:i])}/__init__.py" in source.files
        ]
        if path.endswith(".py"):
            for module in _imported_modules(path, source.files[path]):
                if module.split(".")[0] == "tests" and (found := source.has_module(module)):
                    todo.append(found)
    return sorted(wanted)


def _sdist_pytest_ini(source: TestsSource) -> str:
    """A pytest.ini with the sdist's pytest markers, so our repository's settings stay out."""
    options: dict[str, Any] = {}
    if source.pyproject:
        pyproject = tomllib.loads(source.pyproject.decode())
        options = pyproject.get("tool", {}).get("pytest", {}).get("ini_options", {})
    markers = [str(m) for m in options.get("markers", [])]
    lines = ["# Written by proxima_tools.upstream_tests prepare: the sdist's pytest markers.", ""]
    lines += ["[pytest]", "markers ="] + [f"    {m}" for m in markers]
    return "\n".join(lines) + "\n"
