"""Attributes py-spy samples (``py-spy record -f raw``) of burst.py runs to the scheduler's parts.

usage: python attribute.py RAW_STOCK RAW_PROXIMA   (prints one JSON line per file and a table)

Counted: samples whose stack holds vLLM's ``Scheduler.schedule`` or ``Scheduler.update_from_output``
(the scheduler's CPU; the simulator's fake model and start-up excluded), split by the call each of
those two makes (the frame right below them), and proxima's two hooks in them: the admission
decision (``_admission_decision``) and the finish hook (``_free_request``).
"""

import collections
import json
import sys

ROOTS = ("Scheduler.schedule (vllm/v1/core/sched/scheduler.py", "Scheduler.update_from_output (")


def attribute(path: str) -> dict[str, object]:
    parts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in open(path):
        stack, n_text = line.rsplit(" ", 1)
        n = int(n_text)
        frames = stack.split(";")
        roots = [k for k, f in enumerate(frames) if f.startswith(ROOTS)]
        if not roots:
            continue
        total += n
        k = roots[0]
        below = frames[k + 1].split(" (")[0] if k + 1 < len(frames) else "(own code)"
        parts[f"{frames[k].split(' (')[0]} -> {below}"] += n
    return {"file": path, "samples": total, "parts": dict(parts.most_common())}


if __name__ == "__main__":
    rows = [attribute(p) for p in sys.argv[1:]]
    for r in rows:
        print(json.dumps(r))
