"""A bounded load for the dashboard's picture: phases of client concurrency against one server.

Completions with token-id prompts (exact lengths), a third of them behind one of four shared
prefixes so the prefix cache has something to hit, ``ignore_eos`` so outputs have the planned
length. Every phase ends at its deadline; requests in flight then finish (their client timeout
bounds them). Prints one line per phase: requests sent, answered 200, other statuses.

    python observability/load.py --url http://127.0.0.1:8000 --model tiny \\
        --phases 8:40,32:50,96:60,0:40
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

VOCAB = 1000  # the tiny model's vocabulary is 1,024 ids


def one_request(url: str, model: str, rng: random.Random, prefixes: list[list[int]]) -> str:
    prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(8, 200))]
    if rng.random() < 0.35:
        prompt = rng.choice(prefixes) + prompt
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": rng.randint(8, 160),
        "temperature": 0.8,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
            return str(resp.status)
    except urllib.error.HTTPError as e:
        return str(e.code)
    except Exception as e:  # a timeout or a refused connection: reported, not retried
        return type(e).__name__


def run_phase(url: str, model: str, concurrency: int, seconds: float, seed: int) -> Counter[str]:
    """``concurrency`` closed-loop clients until the deadline."""
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    prefix_rng = random.Random(7)
    prefixes = [[prefix_rng.randrange(3, VOCAB) for _ in range(n)] for n in (64, 128, 192, 256)]

    def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < deadline:
            status = one_request(url, model, rng, prefixes)
            with lock:
                statuses[status] += 1
            if not status.isdigit():
                time.sleep(0.5)  # no server: do not spin

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    if not threads:
        time.sleep(seconds)
    for t in threads:
        t.join()
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="tiny")
    parser.add_argument(
        "--phases", default="8:40,32:50,96:60,0:40", help="concurrency:seconds, comma-separated"
    )
    args = parser.parse_args()
    for k, phase in enumerate(args.phases.split(",")):
        concurrency, seconds = (int(x) for x in phase.split(":"))
        t0 = time.time()
        statuses = run_phase(args.url, args.model, concurrency, seconds, seed=k)
        print(
            f"[load] phase {k}: concurrency {concurrency}, {time.time() - t0:.0f} s, "
            f"{sum(statuses.values())} requests, statuses {dict(statuses)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
