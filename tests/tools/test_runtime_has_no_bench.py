"""The runtime wheel carries the engine only: no benchmark code (proxima-bench is its own
distribution, installed for benchmarking, not with the server)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from proxima_tools.wheels import collect_package

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "vllm-proxima" / "src" / "vllm_proxima"


def test_the_files_the_wheel_adds_hold_no_bench_path() -> None:
    files = collect_package(RUNTIME)
    assert "vllm_proxima/__init__.py" in files and "vllm_proxima/plugin.py" in files
    assert not [name for name in files if "bench" in name.split("/")]
    assert not [name for name in files if name.endswith(".json")]  # model configs went too


def test_the_runtime_never_imports_the_benchmarks() -> None:
    offenders = []
    for path in sorted(RUNTIME.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(REPO)}: {n}"
                for n in names
                if n.split(".")[0] == "proxima_bench" or n.startswith("vllm_proxima.bench")
            ]
    assert not offenders


def test_package_data_lists_no_bench_files() -> None:
    pyproject = tomllib.loads((REPO / "vllm-proxima" / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"].get("package-data", {})
    assert not [p for patterns in data.values() for p in patterns if "bench" in p]
    bench = tomllib.loads((REPO / "proxima-bench" / "pyproject.toml").read_text())
    assert bench["project"]["name"] == "proxima-bench"
    assert "models/*/*.json" in bench["tool"]["setuptools"]["package-data"]["proxima_bench"]
