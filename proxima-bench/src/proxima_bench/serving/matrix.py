"""Stock-vs-proxima serving matrix: all servers up at once, points interleaved.

For one model folder and one set of server arguments this starts OpenAI
servers of the same install, one per *mode*: ``stock`` (``--proxima off``),
``proxima`` (no ``--proxima`` flag: the distribution's default) and any number
of extra proxima-on modes given as ``--mode NAME=ARGS`` (extra server
arguments, e.g. ``--mode admit-stock='--proxima-admission stock'``, for
attributing a difference to one part). They start concurrently (they share
one GPU; pass e.g. ``--gpu-memory-utilization 0.3 --kv-cache-memory-bytes N``);
if a concurrent start fails, those that came up stay up and the failed ones
start again one after the other (``--sequential-start`` starts every server
that way), each server with its own ``VLLM_PORT`` base so that servers
starting together do not draw the same internal port. Then it runs a list of named
points (``--list-points``); each point runs on every server back to back with
identical workload files, in the modes' order rotated by one per point (point
``i`` of repeat ``r`` starts with mode ``(i + r) mod M``), so drift cancels.
Loads come from vLLM's own load generator (``vllm bench serve`` in a
persistent runner, see :mod:`proxima_bench.serving.vllm_bench`), except
``parity``, which sends greedy token-id prompts to ``/v1/completions`` itself
and compares every mode's tokens and top logprobs with stock's.

Every repeat gets fresh prompt words (so prefix-cache hits never carry over
between points or repeats); all modes of one repeat get the same file.
``/metrics`` is scraped before and after every run (and every
``--scrape-interval`` seconds in between) for preemptions, prefix-cache
queries and hits, prompt and generation tokens, the peaks of running
requests and KV usage, and the increase of every ``proxima:*_total`` counter
(scheduler steps and CPU seconds, ...). Ratios are each non-stock mode's
output tok/s over stock's.

``--pair NAME=FOLDER`` adds a second model to the same run: two more servers on
that folder (which must hold the same tokenizer), ``NAME-stock`` (``--proxima
off``) and ``NAME`` (proxima), compared with each other rather than with
``stock`` (ratio and parity). One start-up serves both comparisons, e.g. a
sliding-window variant of the shape beside the full-attention one. Give the
servers one ``--served-model-name`` then (the load generator asks for it).
A pair on ``--model`` itself is an A/A control: ``NAME-stock`` is also compared
with ``stock`` (two stock servers: the machine's spread), ``NAME`` with
``NAME-stock`` (a second proxima / stock figure from the same run).
``--control`` is the cheaper A/A control: one more stock server on ``--model``,
``stock-b``, compared with ``stock`` (three servers instead of four, so it fits
where four of the model do not).

Outputs in ``--out``: ``raw.json`` (rewritten atomically after every run; each
run keeps its ``tail``, how it ended: :mod:`.tail`),
``report.md`` and ``matrix-ratio.png`` (see :mod:`.matrix_report`),
``command.txt``, ``server-MODE.log`` per mode, ``bench.log``,
``workloads/``, ``results/`` (vLLM's JSON) and ``parity/`` (tokens and top
logprobs per request).

Example (CPU, tiny model)::

    python -m proxima_bench.serving.matrix --model models/tiny-llama \\
      --server-args "--enforce-eager --dtype float32 --max-model-len 1024 \\
                     --kv-cache-memory-bytes 16777216" \\
      --env TORCH_COMPILE_DISABLE=1 --scale 0.05 \\
      --points mix-c8,mix-burst,parity --out /tmp/matrix

Three modes (proxima, and proxima with upstream's admission)::

    python -m proxima_bench.serving.matrix --model models/tiny-llama ... \\
      --mode admit-stock='--proxima-admission stock' --out /tmp/matrix3
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import math
import os
import re
import shlex
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from proxima_bench.runinfo import git_info, machine_info
from proxima_bench.serving import metrics_scrape as ms
from proxima_bench.serving.ab import condense_result
from proxima_bench.serving.interrupts import deferred, install_handlers, restore_handlers, shielded
from proxima_bench.serving.server import (
    Server,
    ServerError,
    child_env,
    fatal_error,
    internal_port_env,
    tail,
)
from proxima_bench.serving.tail import run_tail
from proxima_bench.serving.vllm_bench import BenchError, BenchRunner, bench_argv
from proxima_bench.workloads import (
    TokenizerLike,
    WorkloadError,
    load_tokenizer,
    make_workload,
    write_dataset,
)

SCHEMA = "proxima-matrix/1"
MODES = ("stock", "proxima")  # the built-in modes; --mode adds more
BASE = "stock"  # every other mode is compared with it
MODE_NAME = re.compile(r"[A-Za-z0-9-]+")
CONTROL = "stock-b"  # --control: a second stock server on --model, compared with stock
PAIR_STOCK = "-stock"  # --pair NAME adds NAME (proxima) and NAME-stock (--proxima off)
DEFAULT_ESTIMATE_S = 60.0
MIN_REQUESTS = 8
NEAR_TIE_NATS = 0.05
PARITY_TOP_LOGPROBS = 5
PARITY_MIN_TOKEN_ID = 7
POISSON_FRACTION = 0.9
COUNTERS = ("preemptions", "prefix_cache_queries", "prefix_cache_hits")
COUNTERS += ("prompt_tokens", "generation_tokens", "peak_running", "peak_kv_usage")
PROXIMA_COUNTER_PREFIX, PROXIMA_COUNTER_SUFFIX = "proxima:", "_total"


class MatrixError(RuntimeError):
    """Bad arguments or setup for the matrix run."""


# --------------------------------------------------------------------------
# points
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PointSpec:
    """One named point of the matrix (unscaled).

    Attributes:
        name: the fixed point name (``mix-c32``, ``parity``, ...).
        workload: a :mod:`.workloads` name; None for ``parity``.
        num_requests: requests per run before ``--scale``.
        max_concurrency: the client's concurrency cap (None: no cap).
        poisson: Poisson arrivals at 0.9x stock's ``mix-burst`` request rate.
        parity: the greedy parity point (own client, not ``vllm bench``).
        description: one line for ``--list-points`` and the report.
    """

    name: str
    workload: str | None
    num_requests: int
    max_concurrency: int | None = None
    poisson: bool = False
    parity: bool = False
    description: str = ""


def _mix(c: int) -> PointSpec:
    n = min(600, max(16, 4 * c))
    return PointSpec(f"mix-c{c}", "baseline", n, c, description=f"baseline, {n} requests, c={c}")


POINTS: tuple[PointSpec, ...] = (
    *(_mix(c) for c in (1, 8, 32, 64, 128, 256)),
    PointSpec("mix-burst", "baseline", 1000, None, description="baseline, 1000 requests at once"),
    PointSpec(
        "longprompt-c32", "long-prompt", 160, 32, description="prompt U[1500,3000], out U[16,64]"
    ),
    PointSpec(
        "longout-c64", "long-output", 64, 64, description="prompt U[50,200], out U[1000,2000]"
    ),
    PointSpec(
        "poisson",
        "baseline",
        400,
        None,
        poisson=True,
        description="baseline, 400 requests, Poisson at 0.9x stock's mix-burst req/s",
    ),
    PointSpec("mixed-c64", "mixed", 300, 64, description="90% baseline + 10% long-prompt, c=64"),
    PointSpec("sysprompt-c64", "shared-system", 400, 64, description="shared system prompts, c=64"),
    PointSpec("chat-c64", "chat", 400, 64, description="100 chats x 4 turns, by turn, c=64"),
    PointSpec(
        "parity",
        None,
        256,
        64,
        parity=True,
        description="greedy token-id prompts U[32,256] x 128 tokens, logprobs 5",
    ),
)
POINT_NAMES = tuple(p.name for p in POINTS)
PARITY_PROMPT = (32, 256)
PARITY_OUTPUT = 128


def scaled_count(n: int, scale: float) -> int:
    """``n`` times ``scale``, rounded, but at least ``min(n, MIN_REQUESTS)``."""
    return max(min(n, MIN_REQUESTS), round(n * scale))


def scaled_len(n: int, scale: float) -> int:
    """A length times ``scale`` (at least 1)."""
    return max(1, round(n * scale))


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------


@dataclass
class Config:
    """Resolved settings of one matrix run.

    ``modes``: stock, proxima, then the ``--mode`` names in the order given;
    ``mode_args``: every mode's extra server arguments (``--mode-args`` for the
    built-in two, ``--mode`` for the others).
    """

    model: str
    tokenizer: str
    served_name: str
    server_args: list[str]
    mode_args: dict[str, list[str]]
    points: list[PointSpec]
    repeats: int
    scale: float
    seed: int
    max_total_len: int | None
    vocab_size: int | None
    poisson_rate: float | None
    budget_s: float | None
    default_estimate_s: float
    sequential_start: bool
    server_timeout: float
    run_timeout: float
    stop_timeout: float
    scrape_interval: float
    parity_concurrency: int
    warmup_requests: int
    bench_args: list[str]
    env: dict[str, str]
    python: str
    out: Path
    report: bool
    argv: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=lambda: list(MODES))
    pairs: dict[str, str] = field(default_factory=dict)
    requests_scale: float = 1.0
    proxima_on: bool = False
    control: bool = False

    def num_requests(self, spec: PointSpec) -> int:
        """Requests per run of ``spec``: scaled by ``--scale`` and ``--requests-scale``."""
        return scaled_count(spec.num_requests, self.scale * self.requests_scale)

    def bases(self) -> dict[str, str]:
        """Every compared mode and the mode it is compared with, in mode order:
        proxima modes against stock, a ``--pair``'s ``NAME`` against ``NAME-stock``,
        and a pair on the main model itself (an A/A control) also ``NAME-stock``
        against ``stock``: the run-to-run spread of two stock servers."""
        controls = {
            f"{name}{PAIR_STOCK}"
            for name, folder in self.pairs.items()
            if Path(folder).resolve() == Path(self.model).resolve()
        }
        if self.control:
            controls.add(CONTROL)
        return {
            m: (BASE if m in controls else self.base_of(m))
            for m in self.modes
            if not self.is_stock(m) or m in controls
        }

    def base_of(self, mode: str) -> str:
        """The mode ``mode`` is compared with: its pair's stock server, else ``stock``."""
        return f"{mode}{PAIR_STOCK}" if mode in self.pairs else BASE

    def is_stock(self, mode: str) -> bool:
        """Whether ``mode`` runs with ``--proxima off`` (``stock``, ``--control``'s
        ``stock-b``, a pair's ``NAME-stock``)."""
        return (
            mode == BASE
            or (self.control and mode == CONTROL)
            or (mode.endswith(PAIR_STOCK) and mode[: -len(PAIR_STOCK)] in self.pairs)
        )

    def model_of(self, mode: str) -> str:
        """The model folder ``mode``'s server runs (a pair's own, else ``model``)."""
        if mode in (BASE, CONTROL):
            return self.model
        name = mode[: -len(PAIR_STOCK)] if self.is_stock(mode) else mode
        return self.pairs.get(name, self.model)

    def server_argv(self, mode: str) -> list[str]:
        """The server arguments of ``mode`` (stock modes add ``--proxima off``, the
        others ``--proxima on`` with ``--proxima-on``)."""
        head = ["--proxima", "off"] if self.is_stock(mode) else []
        if not head and self.proxima_on:
            head = ["--proxima", "on"]
        return [*head, *self.server_args, *self.mode_args.get(mode, [])]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "model": self.model,
            "tokenizer": self.tokenizer,
            "served_name": self.served_name,
            "server_args": self.server_args,
            "modes": self.modes,
            "mode_args": self.mode_args,
            "server_argv": {m: self.server_argv(m) for m in self.modes},
            "pairs": self.pairs,
            "bases": self.bases(),
            "points": [p.name for p in self.points],
            "repeats": self.repeats,
            "scale": self.scale,
            "requests_scale": self.requests_scale,
            "proxima_on": self.proxima_on,
            "control": self.control,
            "seed": self.seed,
            "max_total_len": self.max_total_len,
            "vocab_size": self.vocab_size,
            "poisson_rate": self.poisson_rate,
            "budget_s": self.budget_s,
            "default_estimate_s": self.default_estimate_s,
            "sequential_start": self.sequential_start,
            "scrape_interval_s": self.scrape_interval,
            "parity_concurrency": self.parity_concurrency,
            "warmup_requests": self.warmup_requests,
            "bench_args": self.bench_args,
            "env": self.env,
        }


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="python -m proxima_bench.serving.matrix",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", help="local model folder (no network)")
    p.add_argument("--tokenizer", help="local tokenizer folder (default: --model)")
    p.add_argument(
        "--server-args", action="append", default=[], help="server arguments for every mode"
    )
    p.add_argument(
        "--mode-args",
        action="append",
        default=[],
        metavar="MODE=ARGS",
        help="extra server arguments for one built-in mode (stock or proxima), "
        "e.g. proxima='--proxima-admission conservative'",
    )
    p.add_argument(
        "--mode",
        action="append",
        default=[],
        dest="modes",
        metavar="NAME=ARGS",
        help="one more server (proxima on) with these extra server arguments, compared "
        "with stock like proxima; repeatable; NAME: letters, digits and '-', e.g. "
        "admit-stock='--proxima-admission stock'",
    )
    p.add_argument(
        "--pair",
        action="append",
        default=[],
        dest="pairs",
        metavar="NAME=FOLDER",
        help="two more servers on another model folder (same tokenizer): NAME-stock "
        "(--proxima off) and NAME (proxima), compared with each other; repeatable",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help=f"one more stock server on --model, {CONTROL}, compared with stock: an A/A "
        "control of the machine's spread with three servers (--pair NAME=MODEL takes four)",
    )
    p.add_argument(
        "--proxima-on",
        action="store_true",
        help="run the proxima servers with --proxima on (default: --proxima auto, which "
        "leaves some models, e.g. sliding-window ones, to stock)",
    )
    p.add_argument("--points", default="all", help="comma-separated points in run order (all)")
    p.add_argument("--list-points", action="store_true", help="print the points and exit")
    p.add_argument("--repeats", type=int, default=1, help="run the point list this often (1)")
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiplies request counts (at least 8) and lengths, not concurrencies (1)",
    )
    p.add_argument(
        "--requests-scale",
        type=float,
        default=1.0,
        help="multiplies request counts only, after --scale: longer points, same lengths (1)",
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed (0)")
    p.add_argument(
        "--max-total-len",
        type=int,
        help="cap prompt+output per request (default: the servers' --max-model-len)",
    )
    p.add_argument(
        "--poisson-rate",
        type=float,
        help="req/s for 'poisson' when no mix-burst was measured in this run",
    )
    p.add_argument("--budget-s", type=float, help="no point starts past this many seconds")
    p.add_argument(
        "--default-estimate-s",
        type=float,
        default=DEFAULT_ESTIMATE_S,
        help=f"estimated seconds of a point never measured ({DEFAULT_ESTIMATE_S:g})",
    )
    p.add_argument("--sequential-start", action="store_true", help="start servers one by one")
    p.add_argument("--server-timeout", type=float, default=900.0, help="seconds to /health")
    p.add_argument("--run-timeout", type=float, default=3600.0, help="seconds per run")
    p.add_argument("--stop-timeout", type=float, default=30.0, help="SIGINT to SIGTERM, s")
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between /metrics scrapes during a run; 0: before and after only (1)",
    )
    p.add_argument(
        "--parity-concurrency", type=int, default=64, help="parallel parity requests (64)"
    )
    p.add_argument(
        "--warmup-requests",
        type=int,
        default=16,
        help="short greedy requests per server after start-up, before any point (16; 0: none)",
    )
    p.add_argument("--bench-args", action="append", default=[], help="extra vllm bench args")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="child env")
    p.add_argument("--python", default=sys.executable, help="interpreter for server and bench")
    p.add_argument("--out", type=Path, help="output folder (default bench-results/matrix-TIME)")
    p.add_argument("--no-report", action="store_true", help="write raw.json only")
    return p


def _opt_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` in an argument list (``--f V`` or ``--f=V``)."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def parse_points(text: str) -> list[PointSpec]:
    """The points named in a comma-separated list (``all``: every point).

    Raises:
        MatrixError: unknown or repeated names, or an empty list.
    """
    names = [x for x in text.replace(" ", "").split(",") if x]
    if names == ["all"]:
        return list(POINTS)
    by_name = {p.name: p for p in POINTS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise MatrixError(
            f"unknown point(s) {', '.join(unknown)}; choose from {', '.join(POINT_NAMES)}"
        )
    if not names or len(set(names)) != len(names):
        raise MatrixError(f"--points {text!r}: give each point once, e.g. mix-c8,parity")
    return [by_name[n] for n in names]


def parse_mode_args(items: Sequence[str]) -> dict[str, list[str]]:
    """``MODE=ARGS`` items as a dict (MODE: stock or proxima).

    Raises:
        MatrixError: bad item or unknown mode.
    """
    result: dict[str, list[str]] = {}
    for item in items:
        label, sep, text = item.partition("=")
        label = label.strip()
        if not sep or label not in MODES:
            raise MatrixError(f"--mode-args {item!r}: expected stock=ARGS or proxima=ARGS")
        result.setdefault(label, []).extend(shlex.split(text))
    return result


def parse_modes(items: Sequence[str]) -> dict[str, list[str]]:
    """``--mode NAME=ARGS`` items as {NAME: args}, in the order given.

    ARGS may be empty (a second proxima server: an A/A control).

    Raises:
        MatrixError: no ``=``, a bad or reserved name, or a name given twice.
    """
    result: dict[str, list[str]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not MODE_NAME.fullmatch(name):
            raise MatrixError(
                f"--mode {item!r}: expected NAME=ARGS, NAME of letters, digits and '-'"
            )
        if name in MODES:
            raise MatrixError(
                f"--mode {item!r}: {name} is a built-in mode; use --mode-args {name}=ARGS"
            )
        if name in result:
            raise MatrixError(f"--mode {name} given twice")
        try:
            result[name] = shlex.split(text)
        except ValueError as e:
            raise MatrixError(f"--mode {item!r}: {e}") from e
    return result


def run_order(modes: Sequence[str], index: int, repeat: int = 0) -> list[str]:
    """The modes' run order at point ``index`` of ``repeat``: ``modes`` rotated
    to start at mode ``(index + repeat) mod M`` (with two modes: flipped every
    point and every repeat)."""
    start = (index + repeat) % len(modes)
    return [*modes[start:], *modes[:start]]


def parse_pairs(items: Sequence[str], taken: Sequence[str]) -> dict[str, str]:
    """``--pair NAME=FOLDER`` items as {NAME: resolved folder}, in the order given.

    Raises:
        MatrixError: a bad or taken name, or a folder without config.json.
    """
    result: dict[str, str] = {}
    for item in items:
        name, sep, folder = item.partition("=")
        name = name.strip()
        if not sep or not MODE_NAME.fullmatch(name) or not folder.strip():
            raise MatrixError(
                f"--pair {item!r}: expected NAME=FOLDER, NAME of letters, digits and '-'"
            )
        names = (name, name + PAIR_STOCK)
        if any(n in taken or n in result or n.removesuffix(PAIR_STOCK) in result for n in names):
            raise MatrixError(f"--pair {name}: the name (or {name}{PAIR_STOCK}) is taken")
        path = Path(folder.strip()).expanduser().resolve()
        if not (path / "config.json").is_file():
            raise MatrixError(f"--pair {item!r}: no config.json in {path} (local folders only)")
        result[name] = str(path)
    return result


def _check_reserved(arg_lists: Sequence[Sequence[str]]) -> None:
    for flag in ("--proxima", "--port", "--host", "--model"):
        for a in (a for args in arg_lists for a in args):
            if a == flag or a.startswith(flag + "="):
                raise MatrixError(
                    f"{flag} is set by the matrix (stock: --proxima off, the other modes: "
                    "the default); remove it from the server and mode args"
                )


def _model_config(model: Path) -> dict[str, Any]:
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise MatrixError(f"--model {model}: cannot read config.json: {e}") from e
    if not isinstance(config, dict):
        raise MatrixError(f"--model {model}: config.json is not an object")
    return config


def _max_total_len(config: dict[str, Any], arg_lists: Sequence[Sequence[str]]) -> int | None:
    lens = [v for args in arg_lists if (v := _opt_value(args, "--max-model-len"))]
    if lens:
        try:
            return min(int(v) for v in lens)
        except ValueError as e:
            raise MatrixError(f"--max-model-len {lens}: not an integer") from e
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def _parse_env(items: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise MatrixError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _check_numbers(args: argparse.Namespace) -> None:
    checks = (
        (args.repeats >= 1, "--repeats must be >= 1"),
        (args.scale > 0, "--scale must be > 0"),
        (args.requests_scale > 0, "--requests-scale must be > 0"),
        (args.budget_s is None or args.budget_s > 0, "--budget-s must be > 0"),
        (args.poisson_rate is None or args.poisson_rate > 0, "--poisson-rate must be > 0"),
        (args.default_estimate_s >= 0, "--default-estimate-s must be >= 0"),
        (args.scrape_interval >= 0, "--scrape-interval must be >= 0"),
        (args.parity_concurrency >= 1, "--parity-concurrency must be >= 1"),
        (args.warmup_requests >= 0, "--warmup-requests must be >= 0"),
        (args.max_total_len is None or args.max_total_len >= 2, "--max-total-len must be >= 2"),
    )
    for ok, message in checks:
        if not ok:
            raise MatrixError(message)


def resolve(argv: Sequence[str]) -> Config:
    """Parse ``argv`` into a :class:`Config`.

    Raises:
        MatrixError: inconsistent or missing settings.
    """
    args = build_parser().parse_args(list(argv))
    _check_numbers(args)
    if not args.model:
        raise MatrixError("--model is required (a local model folder)")
    model = Path(args.model).expanduser().resolve()
    if not (model / "config.json").is_file():
        raise MatrixError(f"--model {args.model}: no config.json there (local folders only)")
    config = _model_config(model)
    tokenizer = Path(args.tokenizer).expanduser().resolve() if args.tokenizer else model
    server_args = [a for text in args.server_args for a in shlex.split(text)]
    mode_args = parse_mode_args(args.mode_args)
    extra_modes = parse_modes(args.modes)
    mode_args.update(extra_modes)
    taken = [*MODES, *extra_modes]
    if args.control:
        if CONTROL in extra_modes:
            raise MatrixError(f"--mode {CONTROL}: the name is --control's")
        taken.append(CONTROL)
    pairs = parse_pairs(args.pairs, taken)
    arg_lists = [server_args, *mode_args.values()]
    _check_reserved(arg_lists)
    if pairs and not _opt_value(server_args, "--served-model-name"):
        raise MatrixError(
            "--pair needs one --served-model-name in --server-args (two model folders, "
            "one name for the load generator to ask for)"
        )
    points = parse_points(args.points)
    vocab = config.get("vocab_size")
    if any(p.parity for p in points) and not (
        isinstance(vocab, int) and vocab > PARITY_MIN_TOKEN_ID
    ):
        raise MatrixError(f"parity needs vocab_size > {PARITY_MIN_TOKEN_ID} in {model}/config.json")
    out = args.out or Path("bench-results") / dt.datetime.now().strftime("matrix-%Y%m%d-%H%M%S")
    return Config(
        model=str(model),
        tokenizer=str(tokenizer),
        served_name=_opt_value(server_args, "--served-model-name") or str(model),
        server_args=server_args,
        mode_args=mode_args,
        points=points,
        repeats=args.repeats,
        scale=args.scale,
        requests_scale=args.requests_scale,
        seed=args.seed,
        max_total_len=args.max_total_len or _max_total_len(config, arg_lists),
        vocab_size=vocab if isinstance(vocab, int) else None,
        poisson_rate=args.poisson_rate,
        budget_s=args.budget_s,
        default_estimate_s=args.default_estimate_s,
        sequential_start=args.sequential_start,
        server_timeout=args.server_timeout,
        run_timeout=args.run_timeout,
        stop_timeout=args.stop_timeout,
        scrape_interval=args.scrape_interval,
        parity_concurrency=args.parity_concurrency,
        warmup_requests=args.warmup_requests if isinstance(vocab, int) else 0,
        bench_args=[a for text in args.bench_args for a in shlex.split(text)],
        env=_parse_env(args.env),
        python=args.python,
        out=out.resolve(),
        report=not args.no_report,
        argv=list(argv),
        modes=[
            *MODES,
            *([CONTROL] if args.control else []),
            *extra_modes,
            *(m for n in pairs for m in (n + PAIR_STOCK, n)),
        ],
        pairs=pairs,
        control=args.control,
        proxima_on=args.proxima_on,
    )


# --------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------


@dataclass
class Prepared:
    """The workload of one point in one repeat (shared by all modes).

    Attributes:
        path: the vLLM ``custom`` JSONL, or the parity prompts' JSON.
        prompt_lens: prompt tokens per request (server count).
        output_lens: output tokens per request.
        kinds: request classes (``mixed``: short / long; ``chat``: turn-T).
        record: what raw.json keeps about it.
        prompts: the token-id prompts of ``parity`` (None for the others).
    """

    path: Path
    prompt_lens: list[int]
    output_lens: list[int]
    kinds: list[str | None]
    record: dict[str, Any]
    prompts: list[list[int]] | None = None


def content_seed(seed: int, repeat: int, spec: PointSpec) -> int:
    """Prompt-word seed of a point in a repeat (fresh per point and repeat)."""
    return seed + 1000 * (1 + POINT_NAMES.index(spec.name)) + 100_000 * repeat


def prepare_bench(
    cfg: Config, spec: PointSpec, repeat: int, tokenizer: TokenizerLike | None
) -> Prepared:
    """Write the JSONL of a ``vllm bench`` point.

    Raises:
        WorkloadError: the workload cannot be built.
    """
    assert spec.workload is not None and tokenizer is not None
    workload = make_workload(spec.workload, cfg.scale, cfg.max_total_len)
    num = cfg.num_requests(spec)
    cseed = content_seed(cfg.seed, repeat, spec)
    path = cfg.out / "workloads" / f"r{repeat}-{spec.name}.jsonl"
    written = write_dataset(
        workload, num, tokenizer, path, seed=cfg.seed, content_seed=cseed, system_seed=cseed
    )
    reqs = written.requests
    record = {
        "file": str(path),
        "workload": spec.workload,
        "params": written.params,
        "num_requests": num,
        "seed": cfg.seed,
        "content_seed": cseed,
        "summary": written.summary(),
    }
    return Prepared(
        path,
        [r.prompt_len for r in reqs],
        [r.output_len for r in reqs],
        [r.kind for r in reqs],
        record,
    )


def parity_lengths(cfg: Config) -> tuple[tuple[int, int], int]:
    """Scaled parity prompt range and output length, within ``max_total_len``."""
    lo, hi = (scaled_len(x, cfg.scale) for x in PARITY_PROMPT)
    out = scaled_len(PARITY_OUTPUT, cfg.scale)
    if cfg.max_total_len is not None:
        out = min(out, max(1, cfg.max_total_len // 2))
        hi = max(1, min(hi, cfg.max_total_len - out))
        lo = min(lo, hi)
    return (lo, hi), out


def prepare_parity(cfg: Config, spec: PointSpec, repeat: int) -> Prepared:
    """Random token-id prompts (ids in ``[7, vocab)``), seeded per repeat."""
    assert cfg.vocab_size is not None
    num = cfg.num_requests(spec)
    (lo, hi), out_len = parity_lengths(cfg)
    rng = np.random.default_rng([cfg.seed, repeat, 7])
    lens = rng.integers(lo, hi + 1, size=num)
    prompts = [
        [int(x) for x in rng.integers(PARITY_MIN_TOKEN_ID, cfg.vocab_size, size=int(n))]
        for n in lens
    ]
    path = cfg.out / "workloads" / f"r{repeat}-{spec.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_json(path, {"prompts": prompts, "max_tokens": out_len})
    record = {
        "file": str(path),
        "num_requests": num,
        "prompt_len": {"min": lo, "max": hi},
        "output_len": out_len,
        "token_ids": [PARITY_MIN_TOKEN_ID, cfg.vocab_size - 1],
        "seed": [cfg.seed, repeat, 7],
    }
    return Prepared(
        path, [len(p) for p in prompts], [out_len] * num, [None] * num, record, prompts=prompts
    )


def prepare_all(cfg: Config, log: Callable[[str], None]) -> dict[tuple[int, str], Prepared]:
    """Every point's workload for every repeat, keyed by (repeat, point name).

    Raises:
        WorkloadError: a workload cannot be built.
    """
    t0 = time.monotonic()
    tokenizer = None
    if any(not p.parity for p in cfg.points):
        with deferred():  # the tokenizer imports torch: no signal mid-import
            tokenizer = load_tokenizer(cfg.tokenizer)
    prepared: dict[tuple[int, str], Prepared] = {}
    for repeat in range(cfg.repeats):
        for spec in cfg.points:
            if spec.parity:
                prepared[repeat, spec.name] = prepare_parity(cfg, spec, repeat)
            else:
                prepared[repeat, spec.name] = prepare_bench(cfg, spec, repeat, tokenizer)
    log(f"wrote {len(prepared)} workload file(s) in {time.monotonic() - t0:.1f}s")
    return prepared


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


class Progress:
    """Timestamped progress lines on stdout (whole lines, also from threads)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        """Print one progress line."""
        line = f"[matrix {time.monotonic() - self.t0:7.1f}s] {message}\n"
        with self._lock:
            sys.stdout.write(line)
            sys.stdout.flush()


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def _now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (linear, as vLLM computes them), None if empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _wait_idle(base_url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            values = ms.scrape(base_url)
        except OSError:
            return
        busy = values.get("vllm:num_requests_running", 0) + values.get(
            "vllm:num_requests_waiting", 0
        )
        if not busy:
            return
        time.sleep(0.5)


def _heartbeat(
    log: Callable[[str], None], tag: str, every: float = 15.0
) -> Callable[[float, dict[str, float]], None]:
    state = {"next": every}

    def tick(elapsed: float, values: dict[str, float]) -> None:
        if elapsed < state["next"]:
            return
        state["next"] = elapsed + every
        kv = values.get("vllm:kv_cache_usage_perc")
        log(
            f"  [{tag}] {elapsed:.0f}s: running "
            f"{values.get('vllm:num_requests_running', 0):.0f}, waiting "
            f"{values.get('vllm:num_requests_waiting', 0):.0f}, KV "
            + (f"{kv * 100:.1f}%" if kv is not None else "?")
            + f", preemptions {values.get('vllm:num_preemptions_total', 0):.0f}"
        )

    return tick


# --------------------------------------------------------------------------
# run state
# --------------------------------------------------------------------------


@dataclass
class RunState:
    """Everything one matrix run shares: settings, record, children, workloads.

    Attributes:
        cfg: the settings.
        raw: the record written to ``raw.json``.
        log: progress lines.
        budget: the ``--budget-s`` clock.
        servers: the servers by mode (once created; stopped at the end).
        runner: the persistent ``vllm bench`` runner (once launched).
        prepared: the workloads by (repeat, point name).
    """

    cfg: Config
    raw: dict[str, Any]
    log: Callable[[str], None]
    budget: Budget
    servers: dict[str, Server] = field(default_factory=dict)
    runner: BenchRunner | None = None
    prepared: dict[tuple[int, str], Prepared] = field(default_factory=dict)

    def save(self) -> None:
        """Rewrite ``raw.json`` (atomically)."""
        _atomic_json(self.cfg.out / "raw.json", self.raw)

    def launch_runner(self) -> BenchRunner:
        """Launch the runner; it is registered (pid saved) before it is ready."""
        cfg = self.cfg
        self.runner = BenchRunner(cfg.out / "bench.log", child_env(cfg.env), cfg.python)
        self.raw.setdefault("bench_runner_pids", []).append(self.runner.launch())
        self.save()
        return self.runner

    def start_runner(self) -> None:
        """Launch the runner and wait until vLLM's bench module is imported.

        Raises:
            BenchError: it died or did not get ready in time.
        """
        self.launch_runner().wait_ready(timeout=self.cfg.server_timeout)


# --------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------


def make_servers(cfg: Config, modes: Sequence[str] | None = None) -> dict[str, Server]:
    """One (not yet started) server per mode (``modes``: only those), on distinct free ports,
    each with its own base for vLLM's internal ports (:func:`internal_port_env`: they start at
    the same moment)."""
    servers: dict[str, Server] = {}
    for index, mode in enumerate(cfg.modes):
        if modes is not None and mode not in modes:
            continue
        for _ in range(10):
            server = Server(
                cfg.model_of(mode),
                cfg.server_argv(mode),
                cfg.out / f"server-{mode}.log",
                python=cfg.python,
                env=internal_port_env(index, cfg.env),
            )
            if all(s.port != server.port for s in servers.values()):
                break
        servers[mode] = server
    return servers


def _launch(state: RunState, mode: str, server: Server) -> None:
    state.log(f"[{mode}] starting server on port {server.port}: " + shlex.join(server.command[1:]))
    server.start()
    assert server.proc is not None
    state.raw["servers"][mode] = {
        "command": server.command,
        "port": server.port,
        "pid": server.proc.pid,
        "log": server.log_path.name,
        "started_at": _now(),
    }


def _ready(state: RunState, mode: str, server: Server) -> None:
    """Wait for ``/health``, record start-up facts, check the proxima mode.

    Raises:
        ServerError: not healthy in time, or the wrong proxima mode.
    """
    log = state.log
    startup = server.wait_healthy(state.cfg.server_timeout, progress=lambda m: log(f"[{mode}] {m}"))
    facts = server.log_facts()
    try:
        samples = ms.parse_prometheus(ms.fetch_metrics(server.base_url))
    except OSError:
        samples = []
    state.raw["servers"][mode].update(
        startup_s=round(startup, 2),
        ready_at=_now(),
        log_facts=facts,
        cache_config=ms.info_labels(samples, "vllm:cache_config_info")[:1],
    )
    want = "off" if state.cfg.is_stock(mode) else "on"
    if facts.get("mode") not in (None, want):
        hint = " (PROXIMA_MODE=off in the environment?)" if want == "on" else ""
        raise ServerError(
            f"the {mode} server reports proxima {facts.get('mode')}, expected {want}{hint}"
        )
    log(
        f"[{mode}] server ready in {startup:.1f}s (proxima {facts.get('mode', '?')}, "
        f"KV {facts.get('kv_cache_size_tokens', '?')} tokens)"
    )


class StartError(ServerError):
    """Some of the servers started together did not come up: ``failed`` names them."""

    def __init__(self, message: str, failed: list[str]) -> None:
        super().__init__(message)
        self.failed = failed


def _wait_all_ready(state: RunState, servers: dict[str, Server]) -> None:
    """Wait for the launched ``servers`` in parallel.

    Raises:
        StartError: the first failure's message, and every failed mode (all are waited for).
        Exception: a failure that is not a ``ServerError`` (a bug), as raised.
    """
    pool = cf.ThreadPoolExecutor(len(servers), thread_name_prefix="wait-ready")
    try:
        futures = {m: pool.submit(_ready, state, m, s) for m, s in servers.items()}
        errors = {m: f.exception() for m, f in futures.items()}
    finally:
        # On Ctrl-C do not wait: the waiters end when the servers are stopped.
        pool.shutdown(wait=False, cancel_futures=True)
    failed = {m: e for m, e in errors.items() if e is not None}
    for error in failed.values():
        if not isinstance(error, ServerError):
            raise error
    if failed:
        raise StartError(str(next(iter(failed.values()))), list(failed))


def _stop_servers(state: RunState) -> None:
    for mode, server in state.servers.items():
        if server.proc is None:
            continue
        state.log(f"[{mode}] stopping server")
        with shielded(state.log):
            code = server.stop(state.cfg.stop_timeout)
        entry = state.raw["servers"].setdefault(mode, {})
        entry["exit_code"] = code
        entry["fatal_error"] = fatal_error(server.log_path)


def start_servers(state: RunState, while_loading: Callable[[], None]) -> None:
    """Start every mode's server (concurrently unless ``--sequential-start``).

    ``while_loading`` runs once while the first servers load (the workload
    files). After a failed concurrent start the servers that came up stay up and
    the failed ones are started again, one by one (on an H100 one of two servers
    died of a port both drew; restarting both had cost the plan its budget).

    Raises:
        ServerError: the servers could not be started.
    """
    raw, record = state.raw, state.raw["servers"]
    pending = [while_loading]

    def run_pending() -> None:
        while pending:
            pending.pop()()

    def one_by_one(servers: dict[str, Server]) -> None:
        for mode, server in servers.items():
            _launch(state, mode, server)
            state.save()
            run_pending()
            _wait_all_ready(state, {mode: server})

    if state.cfg.sequential_start:
        raw["start"] = {"method": "sequential", "t0_sequential": _now()}
        state.servers = make_servers(state.cfg)
        one_by_one(state.servers)
        raw["start"]["ready"] = _now()
        return
    raw["start"] = {"method": "concurrent", "t0": _now()}
    state.servers = make_servers(state.cfg)
    try:
        for mode, server in state.servers.items():
            _launch(state, mode, server)
        state.save()
        run_pending()
        _wait_all_ready(state, state.servers)  # every server waited for, up or failed
        raw["start"]["ready"] = _now()
        return
    except StartError as e:
        failed = e.failed
        state.log(
            f"concurrent start failed ({str(e).splitlines()[0]}); "
            f"starting {', '.join(failed)} again, one by one"
        )
        raw["start"]["concurrent_error"] = str(e)[-4000:]
        raw["start"]["concurrent_servers"] = {m: dict(record[m]) for m in failed if m in record}
        for mode in failed:
            server = state.servers[mode]
            if server.proc is not None:
                state.log(f"[{mode}] stopping server")
                with shielded(state.log):
                    server.stop(state.cfg.stop_timeout)
            if server.log_path.exists():
                server.log_path.replace(server.log_path.with_suffix(".concurrent.log"))
            record.pop(mode, None)
        state.save()
    raw["start"].update(method="concurrent, then one by one", retried=failed, t0_retry=_now())
    again = make_servers(state.cfg, failed)
    state.servers = {m: again.get(m) or state.servers[m] for m in state.cfg.modes}
    one_by_one(again)
    raw["start"]["ready"] = _now()


# --------------------------------------------------------------------------
# one run: vllm bench
# --------------------------------------------------------------------------


def class_stats(kinds: Sequence[str | None], per_request: dict[str, Any]) -> dict[str, Any]:
    """P50 / P95 TTFT and E2E (ms) per request class (successful requests only).

    ``per_request`` is :func:`condense_result`'s, in dataset order.
    """
    ttfts = per_request.get("ttfts") or []
    e2els = per_request.get("e2els") or []
    errors = per_request.get("errors") or {}
    groups: dict[str, list[int]] = {}
    for i, kind in enumerate(kinds):
        if kind is not None:
            groups.setdefault(kind, []).append(i)
    stats: dict[str, Any] = {}
    for kind, idx in sorted(groups.items()):
        ok = [i for i in idx if i < len(ttfts) and str(i) not in errors and ttfts[i]]
        t = [ttfts[i] * 1000 for i in ok]
        e = [e2els[i] * 1000 for i in ok if i < len(e2els) and e2els[i] is not None]
        stats[kind] = {
            "requests": len(idx),
            "completed": len(ok),
            "p50_ttft_ms": percentile(t, 50),
            "p95_ttft_ms": percentile(t, 95),
            "p50_e2el_ms": percentile(e, 50),
            "p95_e2el_ms": percentile(e, 95),
        }
    return stats


def bench_checks(
    metrics: dict[str, Any],
    per_request: dict[str, Any],
    counters: dict[str, Any],
    prepared: Prepared,
) -> dict[str, Any]:
    """Completeness and token-exactness checks of one ``vllm bench`` run."""
    got = per_request.get("input_lens") or []
    want = prepared.prompt_lens
    mismatches = sum(1 for a, b in zip(want, got, strict=False) if a != b)
    return {
        "requests": len(want),
        "all_completed": metrics.get("completed") == len(want) and not metrics.get("failed"),
        "client_prompt_len_mismatches": mismatches + abs(len(want) - len(got)),
        "expected_prompt_tokens": sum(want),
        "expected_output_tokens": sum(prepared.output_lens),
        "server_prompt_tokens": counters.get("prompt_tokens"),
        "server_generation_tokens": counters.get("generation_tokens"),
        "client_output_tokens": metrics.get("total_output_tokens"),
    }


@dataclass
class RunContext:
    """One (point, mode) run: the run state, which server, repeat, time limit."""

    state: RunState
    mode: str
    repeat: int
    timeout: float

    @property
    def cfg(self) -> Config:
        """The run's settings."""
        return self.state.cfg

    @property
    def server(self) -> Server:
        """The server of this mode."""
        return self.state.servers[self.mode]

    def log(self, message: str) -> None:
        """One progress line."""
        self.state.log(message)


def _scraper(ctx: RunContext, tag: str) -> ms.MetricsScraper:
    interval = ctx.cfg.scrape_interval or 1.0
    scraper = ms.MetricsScraper(ctx.server.base_url, interval, on_tick=_heartbeat(ctx.log, tag))
    scraper.scrape_once()  # the "before" values of the counters
    if ctx.cfg.scrape_interval > 0:
        scraper.start()
    return scraper


def gauge_names(text: str) -> set[str]:
    """The metrics a Prometheus text declares ``# TYPE NAME gauge``."""
    names = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"] and parts[3] == "gauge":
            names.add(parts[2])
    return names


def _gauges(base_url: str) -> set[str]:
    """:func:`gauge_names` of a server's ``/metrics`` (empty when unreachable)."""
    try:
        return gauge_names(ms.fetch_metrics(base_url))
    except Exception:  # noqa: BLE001 - best effort: without names no counter is left out
        return set()


def proxima_counters(
    series: ms.TimeSeries, gauges: Collection[str] = frozenset()
) -> dict[str, float]:
    """The increase of every ``proxima:*_total`` counter over a run, by name.

    ``gauges``: names to leave out although they end in ``_total`` (e.g. the
    gauge ``proxima:kv_slots_total``). A counter absent from the first scrape
    (not exported before its first increase) counts from 0.
    """
    deltas: dict[str, float] = {}
    for name, values in sorted(series.values.items()):
        if not (name.startswith(PROXIMA_COUNTER_PREFIX) and name.endswith(PROXIMA_COUNTER_SUFFIX)):
            continue
        if name in gauges:
            continue
        present = [v for v in values if v is not None]
        if present:
            first = values[0] if values[0] is not None else 0.0
            deltas[name] = present[-1] - first
    return deltas


def _counters(series: ms.TimeSeries, gauges: Collection[str] = frozenset()) -> dict[str, Any]:
    summary = ms.summarize(series)
    counters = {k: summary.get(k) for k in COUNTERS} | {"samples": summary.get("samples")}
    counters["proxima"] = proxima_counters(series, gauges)
    return counters


def run_bench(
    ctx: RunContext, spec: PointSpec, prepared: Prepared, rate: float | None
) -> dict[str, Any]:
    """One ``vllm bench serve`` run of a point on one server.

    A benchmark error is recorded (not raised); a dead or stuck runner is
    replaced.
    """
    cfg, tag = ctx.cfg, f"{spec.name} r{ctx.repeat} {ctx.mode}"
    result_dir = cfg.out / "results"
    filename = f"r{ctx.repeat}-{spec.name}-{ctx.mode}.json"
    extra = list(cfg.bench_args)
    if cfg.served_name != cfg.model:
        extra = ["--served-model-name", cfg.served_name, *extra]
    argv = bench_argv(
        host=ctx.server.host,
        port=ctx.server.port,
        model=cfg.model,
        tokenizer=cfg.tokenizer,
        dataset_path=prepared.path,
        num_prompts=len(prepared.prompt_lens),
        result_dir=result_dir,
        result_filename=filename,
        label=f"{ctx.mode}-{spec.name}",
        max_concurrency=spec.max_concurrency,
        request_rate=rate,
        seed=cfg.seed,
        extra=extra,
    )
    run: dict[str, Any] = {
        "started_at": _now(),
        "bench_argv": argv,
        "result_file": str(result_dir / filename),
        "request_rate": rate,
        "error": None,
    }
    ctx.log(f"[{tag}] vllm bench serve: {len(prepared.prompt_lens)} requests")
    scraper = _scraper(ctx, tag)
    t0 = time.monotonic()
    try:
        if ctx.state.runner is None:
            raise BenchError("the vllm bench runner is not running")
        ctx.state.runner.run(argv, timeout=ctx.timeout)
    except BenchError as e:
        run["error"] = str(e)[-4000:]
        _recover_runner(ctx, str(e))
    finally:
        run["wall_s"] = round(time.monotonic() - t0, 3)
        run["counters"] = _counters(scraper.stop(), _gauges(ctx.server.base_url))
    if run["error"] is None:
        _read_result(run, result_dir / filename, prepared)
    return run


def _recover_runner(ctx: RunContext, error: str) -> None:
    """Replace a dead or timed-out runner (a stuck one would keep the load on)."""
    runner = ctx.state.runner
    dead = runner is None or runner.proc is None or runner.proc.poll() is not None
    if dead or "did not finish within" in error:
        if runner is not None:
            runner.stop()
        ctx.state.runner = None
        ctx.log("restarting the vllm bench runner")
        ctx.state.start_runner()


def _read_result(run: dict[str, Any], path: Path, prepared: Prepared) -> None:
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        run["error"] = f"cannot read vLLM's result {path}: {e}"
        return
    metrics, per_request = condense_result(result)
    run["metrics"] = metrics
    run["errors"] = per_request.get("errors")
    run["checks"] = bench_checks(metrics, per_request, run["counters"], prepared)
    run["tail"] = run_tail(result)
    if any(k is not None for k in prepared.kinds):
        run["classes"] = class_stats(prepared.kinds, per_request)


# --------------------------------------------------------------------------
# one run: parity
# --------------------------------------------------------------------------


def _token_id(text: str) -> int:
    """``token_id:123`` (``return_tokens_as_token_ids``) -> 123."""
    return int(text.rsplit(":", 1)[1])


def parity_request(
    base_url: str, model: str, prompt: list[int], max_tokens: int, timeout: float
) -> dict[str, Any]:
    """One greedy completion of a token-id prompt with top-5 logprobs.

    Returns:
        ``{"tokens": [ids], "top": [[[id, logprob], ...] per position],
        "seconds": latency}`` (top sorted best first), or ``{"error": message}``.
    """
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": PARITY_TOP_LOGPROBS,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
    }
    request = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            data = json.loads(resp.read())
        seconds = time.monotonic() - t0
        logprobs = data["choices"][0]["logprobs"]
        tokens = [_token_id(t) for t in logprobs["tokens"]]
        top = [
            sorted(([_token_id(k), v] for k, v in (step or {}).items()), key=lambda x: -x[1])
            for step in logprobs["top_logprobs"]
        ]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        detail = ""
        if isinstance(e, urllib.error.HTTPError):
            detail = ": " + e.read().decode("utf-8", "replace")[:300]
        return {"error": f"{type(e).__name__}: {e}{detail}"}
    return {"tokens": tokens, "top": top, "seconds": round(seconds, 4)}


def send_all(
    base_url: str,
    model: str,
    prompts: Sequence[list[int]],
    max_tokens: int,
    concurrency: int,
    timeout: float,
) -> list[dict[str, Any]]:
    """:func:`parity_request` for every prompt, ``concurrency`` at a time, in order."""
    pool = cf.ThreadPoolExecutor(concurrency, thread_name_prefix="parity")
    try:
        return list(
            pool.map(lambda p: parity_request(base_url, model, p, max_tokens, timeout), prompts)
        )
    finally:
        # On Ctrl-C do not wait: open requests end when the server is stopped.
        pool.shutdown(wait=False, cancel_futures=True)


def warm_up(server: Server, cfg: Config) -> dict[str, Any]:
    """A few short greedy token-id requests, so no point pays for first-use costs."""
    assert cfg.vocab_size is not None
    rng = np.random.default_rng([cfg.seed, 99])
    (lo, hi), out_len = parity_lengths(cfg)
    prompts = [
        [int(x) for x in rng.integers(PARITY_MIN_TOKEN_ID, cfg.vocab_size, size=int(n))]
        for n in rng.integers(lo, hi + 1, size=cfg.warmup_requests)
    ]
    t0 = time.monotonic()
    outputs = send_all(
        server.base_url,
        cfg.served_name,
        prompts,
        min(16, out_len),
        cfg.parity_concurrency,
        cfg.server_timeout,
    )
    failed = [o["error"] for o in outputs if "error" in o]
    return {
        "requests": len(prompts),
        "failed": len(failed),
        "first_error": failed[0] if failed else None,
        "seconds": round(time.monotonic() - t0, 2),
    }


def run_parity(ctx: RunContext, spec: PointSpec, prepared: Prepared) -> dict[str, Any]:
    """Send every parity prompt (``--parity-concurrency`` at a time) to one server.

    The tokens and top logprobs go to ``parity/rR-MODE.json``; the run record
    keeps counts, throughput and the file name.
    """
    cfg, tag = ctx.cfg, f"{spec.name} r{ctx.repeat} {ctx.mode}"
    assert prepared.prompts is not None
    max_tokens = prepared.output_lens[0] if prepared.output_lens else 1
    path = cfg.out / "parity" / f"r{ctx.repeat}-{ctx.mode}.json"
    run: dict[str, Any] = {"started_at": _now(), "detail_file": str(path), "error": None}
    ctx.log(f"[{tag}] {len(prepared.prompts)} greedy requests, {max_tokens} tokens each")
    scraper = _scraper(ctx, tag)
    t0 = time.monotonic()
    try:
        outputs = send_all(
            ctx.server.base_url,
            cfg.served_name,
            prepared.prompts,
            max_tokens,
            cfg.parity_concurrency,
            ctx.timeout,
        )
    finally:
        wall = time.monotonic() - t0
        run["wall_s"] = round(wall, 3)
        run["counters"] = _counters(scraper.stop(), _gauges(ctx.server.base_url))
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_json(path, {"mode": ctx.mode, "repeat": ctx.repeat, "requests": outputs})
    failed = [i for i, o in enumerate(outputs) if "error" in o]
    out_tokens = sum(len(o.get("tokens", [])) for o in outputs)
    e2e_ms = [o["seconds"] * 1000 for o in outputs if "seconds" in o]
    run["metrics"] = {
        "completed": len(outputs) - len(failed),
        "failed": len(failed),
        "duration": round(wall, 3),
        "total_output_tokens": out_tokens,
        "output_throughput": out_tokens / wall if wall > 0 else None,
        "request_throughput": (len(outputs) - len(failed)) / wall if wall > 0 else None,
        "p50_e2el_ms": percentile(e2e_ms, 50),
        "p95_e2el_ms": percentile(e2e_ms, 95),
    }
    run["errors"] = {str(i): outputs[i]["error"] for i in failed[:20]}
    run["checks"] = {
        "requests": len(outputs),
        "all_completed": not failed,
        "expected_output_tokens": sum(prepared.output_lens),
        "client_output_tokens": out_tokens,
        "server_prompt_tokens": run["counters"].get("prompt_tokens"),
        "expected_prompt_tokens": sum(prepared.prompt_lens),
    }
    if failed:
        run["error"] = f"{len(failed)} parity request(s) failed: {outputs[failed[0]]['error']}"
    return run


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _gap(top: list[list[Any]] | None) -> float | None:
    if not top or len(top) < 2:
        return None
    return float(top[0][1]) - float(top[1][1])


def compare_parity(
    stock: Sequence[dict[str, Any]],
    proxima: Sequence[dict[str, Any]],
    near_tie: float = NEAR_TIE_NATS,
) -> dict[str, Any]:
    """Greedy parity of two servers' outputs for the same prompts.

    ``proxima`` is whichever mode is compared with stock (the ``proxima_*``
    keys of a divergence are that mode's).

    Definitions (over requests both servers completed):

    * ``identical``: requests whose token sequences are equal;
    * ``token_agreement``: sum of common-prefix lengths (tokens before the
      first divergence) / sum of stock's token counts; tokens after a
      divergence count as disagreeing, since the contexts differ from there;
    * ``positionwise_agreement``: positions with equal tokens / stock tokens;
    * per diverging request: the first divergent position and stock's gap
      between its top-1 and top-2 logprob there (nats); a *near tie* is a gap
      below ``near_tie``.
    """
    identical = common = positional = total = failed = 0
    divergences: list[dict[str, Any]] = []
    for i, (a, b) in enumerate(zip(stock, proxima, strict=True)):
        if "error" in a or "error" in b:
            failed += 1
            continue
        ta, tb = a["tokens"], b["tokens"]
        total += len(ta)
        positional += sum(1 for x, y in zip(ta, tb, strict=False) if x == y)
        first = _first_divergence(ta, tb)
        if first is None:
            identical += 1
            common += len(ta)
            continue
        common += first
        gap = _gap(a["top"][first] if first < len(a["top"]) else None)
        divergences.append(
            {
                "request": i,
                "position": first,
                "stock_token": ta[first] if first < len(ta) else None,
                "proxima_token": tb[first] if first < len(tb) else None,
                "stock_gap": gap,
                "proxima_gap": _gap(b["top"][first] if first < len(b["top"]) else None),
            }
        )
    gaps = [d["stock_gap"] for d in divergences if d["stock_gap"] is not None]
    return {
        "requests": len(stock),
        "compared": len(stock) - failed,
        "failed": failed,
        "identical": identical,
        "total_tokens": total,
        "token_agreement": common / total if total else None,
        "positionwise_agreement": positional / total if total else None,
        "near_tie_nats": near_tie,
        "divergences": len(divergences),
        "near_tie_divergences": sum(1 for g in gaps if g < near_tie),
        "max_divergence_gap": max(gaps) if gaps else None,
        "diverging": divergences,
    }


# --------------------------------------------------------------------------
# the matrix loop
# --------------------------------------------------------------------------


class Budget:
    """The ``--budget-s`` clock and per-point time estimates (``modes``: all modes)."""

    def __init__(
        self, total_s: float | None, default_s: float, modes: Sequence[str] = MODES
    ) -> None:
        self.total_s = total_s
        self.default_s = default_s
        self.modes = tuple(modes)
        self.t0 = time.monotonic()
        self.walls: dict[tuple[str, str], float] = {}  # (point, mode) -> latest wall

    def left(self) -> float:
        """Seconds left (inf without a budget)."""
        if self.total_s is None:
            return math.inf
        return self.total_s - (time.monotonic() - self.t0)

    def point_estimate(self, point: str) -> float:
        """All modes of a point: earlier measurements (a mode not measured yet
        counted as the slowest measured one), else the default."""
        known = [self.walls.get((point, m)) for m in self.modes]
        values = [v for v in known if v is not None]
        if not values:
            return self.default_s
        return sum(v if v is not None else max(values) for v in known)

    def mode_estimate(self, point: str, mode: str, other: str) -> float:
        """One mode of a point: the time of ``other`` (the mode run just before
        it, this repeat), else this mode's earlier time, else the default."""
        for key in ((point, other), (point, mode)):
            if key in self.walls:
                return self.walls[key]
        return self.default_s

    def why_not(self, estimate: float) -> str | None:
        """The skip reason when ``estimate`` seconds do not fit, else None."""
        left = self.left()
        if left >= estimate:
            return None
        return f"budget: {max(left, 0):.0f}s left, estimated {estimate:.0f}s"


def poisson_rate(cfg: Config, raw: dict[str, Any], repeat: int) -> tuple[float | None, str]:
    """The ``poisson`` point's request rate and where it came from.

    0.9x the stock server's request throughput at ``mix-burst`` (this repeat's
    if measured, else the latest), else ``--poisson-rate``; None when neither.
    """
    bursts = [
        e
        for e in raw["runs"]
        if e["point"] == "mix-burst"
        and ((e["modes"].get("stock") or {}).get("metrics") or {}).get("request_throughput")
    ]
    bursts.sort(key=lambda e: (e["repeat"] == repeat, e["repeat"]))
    if bursts:
        burst = bursts[-1]
        rps = float(burst["modes"]["stock"]["metrics"]["request_throughput"])
        source = f"{POISSON_FRACTION:g} x stock mix-burst {rps:.3f} req/s, repeat {burst['repeat']}"
        return POISSON_FRACTION * rps, source
    if cfg.poisson_rate is not None:
        return cfg.poisson_rate, "--poisson-rate"
    return None, "mix-burst has not been measured in this run and --poisson-rate is not given"


def ratio(
    entry: dict[str, Any], key: str = "output_throughput", mode: str = "proxima", base: str = BASE
) -> float | None:
    """``mode`` / ``base`` of a metric in a point entry (None if either is missing)."""
    values = [((entry["modes"].get(m) or {}).get("metrics") or {}).get(key) for m in (base, mode)]
    if any(not isinstance(v, int | float) for v in values) or not values[0]:
        return None
    return float(values[1]) / float(values[0])


def ratios(
    entry: dict[str, Any],
    modes: Sequence[str],
    key: str = "output_throughput",
    bases: dict[str, str] | None = None,
) -> dict[str, float | None]:
    """Every compared mode's :func:`ratio` to its base (``bases``; default stock), by mode.

    Without ``bases`` every mode but stock is compared with stock; with it, only its keys.
    """
    if bases is None:
        bases = {m: BASE for m in modes if m != BASE}
    return {m: ratio(entry, key, m, bases[m]) for m in modes if m in bases}


def _run_line(entry: dict[str, Any]) -> str:
    parts = []
    for mode in entry.get("order") or list(entry["modes"]):
        run = entry["modes"].get(mode) or {}
        m = run.get("metrics") or {}
        c = run.get("counters") or {}
        tput = m.get("output_throughput")
        parts.append(f"{mode} {tput:.1f} tok/s" if tput is not None else f"{mode} -")
        preempt = c.get("preemptions")
        parts[-1] += f" (preemptions {'?' if preempt is None else f'{preempt:.0f}'}, "
        parts[-1] += f"{run.get('wall_s', 0):.1f}s)"
    shown = [f"{m} {r:.3f}" for m, r in (entry.get("ratios") or {}).items() if r is not None]
    return ", ".join(parts) + (
        f"; ratios (to stock, or a pair's own): {', '.join(shown)}" if shown else ""
    )


def _check_alive(servers: dict[str, Server]) -> None:
    for mode, server in servers.items():
        if not (server.alive() and server.healthy()):
            fatal = fatal_error(server.log_path)
            state = "died" if not server.alive() else "is unhealthy (/health fails)"
            raise ServerError(
                f"the {mode} server {state}"
                + (f": {fatal}" if fatal else "")
                + f"; last lines of {server.log_path}:\n{tail(server.log_path)}"
            )


def run_point(state: RunState, spec: PointSpec, repeat: int, index: int) -> None:
    """Every mode of one point (order rotating), appended to ``raw['runs']``.

    The order is :func:`run_order` (``cfg.modes`` rotated by ``index +
    repeat``). The point is skipped (and listed with the reason) when its
    estimate does not fit the budget or, for ``poisson``, no rate is known; a
    later mode (and the ones after it) when the previous mode's time does not
    fit any more.

    Raises:
        ServerError: a server died or stopped answering.
    """
    cfg, raw, budget = state.cfg, state.raw, state.budget
    order = run_order(cfg.modes, index, repeat)
    rate = source = None
    if spec.poisson:
        rate, source = poisson_rate(cfg, raw, repeat)
        if rate is None:
            _skip(state, spec, repeat, source)
            return
        state.log(f"[{spec.name} r{repeat}] request rate {rate:.3f} req/s ({source})")
    reason = budget.why_not(budget.point_estimate(spec.name))
    if reason:
        _skip(state, spec, repeat, reason)
        return
    entry: dict[str, Any] = {
        "point": spec.name,
        "repeat": repeat,
        "index": index,
        "order": list(order),
        "spec": _spec_dict(spec, cfg),
        "workload": state.prepared[repeat, spec.name].record,
        "modes": {},
    }
    if spec.poisson:
        entry["request_rate"], entry["request_rate_source"] = rate, source
    raw["runs"].append(entry)
    for k, mode in enumerate(order):
        if k >= 1:
            reason = budget.why_not(budget.mode_estimate(spec.name, mode, order[k - 1]))
            if reason:
                for rest in order[k:]:
                    _skip(state, spec, repeat, reason, rest)
                break
        _wait_idle(state.servers[mode].base_url)
        entry["modes"][mode] = _run_mode(state, spec, repeat, mode, rate)
        budget.walls[spec.name, mode] = entry["modes"][mode]["wall_s"]
        state.save()
        _check_alive(state.servers)
    _finish_entry(state, entry)


def _run_mode(
    state: RunState, spec: PointSpec, repeat: int, mode: str, rate: float | None
) -> dict[str, Any]:
    """One mode of a point (bench or parity); the time limit keeps to the budget."""
    timeout = max(10.0, min(state.cfg.run_timeout, state.budget.left()))
    ctx = RunContext(state=state, mode=mode, repeat=repeat, timeout=timeout)
    prepared = state.prepared[repeat, spec.name]
    run = run_parity(ctx, spec, prepared) if spec.parity else run_bench(ctx, spec, prepared, rate)
    if run.get("error"):
        state.log(f"[{spec.name} r{repeat} {mode}] FAILED: {run['error'].splitlines()[0]}")
    return run


def _finish_entry(state: RunState, entry: dict[str, Any]) -> None:
    """The ratios (and the parity comparisons) of a point whose modes have run.

    ``ratios``: every non-stock mode / stock; ``ratio``: proxima's (as before
    there were more modes). Parity: ``parity`` is proxima vs stock,
    ``parity_vs_stock`` the other modes' (by mode; a ``--pair`` mode's against its
    ``NAME-stock``, the same model).
    """
    cfg = state.cfg
    entry["ratios"] = ratios(entry, cfg.modes, bases=cfg.bases())
    entry["ratio"] = entry["ratios"].get("proxima")
    if entry["point"] == "parity":
        for mode in cfg.modes:
            run, base = entry["modes"].get(mode), entry["modes"].get(cfg.base_of(mode))
            if cfg.is_stock(mode) or not run or not base:
                continue
            stock_requests = json.loads(Path(base["detail_file"]).read_text())["requests"]
            detail = json.loads(Path(run["detail_file"]).read_text())["requests"]
            p = compare_parity(stock_requests, detail)
            if mode == "proxima":
                entry["parity"] = p
            else:
                entry.setdefault("parity_vs_stock", {})[mode] = p
            state.log(
                f"[parity r{entry['repeat']} {mode} vs {cfg.base_of(mode)}] identical "
                f"{p['identical']}/{p['compared']}, "
                f"token agreement {p['token_agreement'] or 0:.4f}, "
                f"divergences {p['divergences']} ({p['near_tie_divergences']} at near-ties)"
            )
    state.log(f"[{entry['point']} r{entry['repeat']}] " + _run_line(entry))
    state.save()


def _spec_dict(spec: PointSpec, cfg: Config) -> dict[str, Any]:
    return {
        "workload": spec.workload,
        "num_requests": cfg.num_requests(spec),
        "max_concurrency": spec.max_concurrency,
        "poisson": spec.poisson,
        "parity": spec.parity,
        "description": spec.description,
    }


def _skip(
    state: RunState, spec: PointSpec, repeat: int, reason: str, mode: str | None = None
) -> None:
    item = {"point": spec.name, "repeat": repeat, "reason": reason}
    if mode is not None:
        item["mode"] = mode
    state.raw["skipped"].append(item)
    state.log(f"[{spec.name} r{repeat}] SKIPPED{f' {mode}' if mode else ''}: {reason}")
    state.save()


def _skip_rest(state: RunState, reason: str) -> None:
    done = {(e["point"], e["repeat"]) for e in state.raw["runs"]}
    done |= {(s["point"], s["repeat"]) for s in state.raw["skipped"]}
    for repeat in range(state.cfg.repeats):
        for spec in state.cfg.points:
            if (spec.name, repeat) not in done:
                _skip(state, spec, repeat, reason)


def _new_raw(cfg: Config) -> dict[str, Any]:
    command = [cfg.python, "-m", "proxima_bench.serving.matrix", *cfg.argv]
    return {
        "schema": SCHEMA,
        "created": _now(),
        "command": command,
        "cwd": os.getcwd(),
        "git": git_info(Path.cwd(), Path(__file__).resolve()),
        "machine": machine_info(),
        "config": cfg.to_dict(),
        "start": {},
        "servers": {},
        "runs": [],
        "skipped": [],
        "status": "running",
        "error": None,
    }


def _failed(raw: dict[str, Any]) -> bool:
    for entry in raw["runs"]:
        for run in entry["modes"].values():
            if run.get("error") or not (run.get("checks") or {}).get("all_completed"):
                return True
    return False


def run_matrix(cfg: Config, log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], int]:
    """Run the whole matrix; returns (raw record, exit status).

    ``raw.json`` is rewritten after every run, so an interrupted or killed run
    keeps what it measured. Exit status: 0 all good, 1 errors in runs, 2 bad
    setup, 130 interrupted.
    """
    cfg.out.mkdir(parents=True, exist_ok=True)
    state = RunState(
        cfg=cfg,
        raw=_new_raw(cfg),
        log=log or Progress(),
        budget=Budget(cfg.budget_s, cfg.default_estimate_s, cfg.modes),
    )
    raw = state.raw
    (cfg.out / "command.txt").write_text(
        f"# cwd: {os.getcwd()}\n{shlex.join(raw['command'])}\n", encoding="utf-8"
    )
    state.log(f"output: {cfg.out}")
    state.log(f"modes {', '.join(cfg.modes)}")
    state.log(f"points {', '.join(p.name for p in cfg.points)} x {cfg.repeats} repeat(s)")
    state.save()
    status = 0
    previous = install_handlers()
    try:
        status = _run_all(state)
    except KeyboardInterrupt as e:
        raw["status"], status = "interrupted", 130
        state.log(f"interrupted ({e or 'Ctrl-C'}): stopping everything")
    except (WorkloadError, MatrixError) as e:
        raw["status"], raw["error"], status = "errors", str(e), 2
        state.log(f"ERROR: {e}")
    finally:
        _cleanup(state)
        restore_handlers(previous)
        state.save()
    return raw, _report(state, status)


def _warm_up_all(state: RunState) -> None:
    for mode, server in state.servers.items():
        warm = state.raw["servers"][mode]["warmup"] = warm_up(server, state.cfg)
        failed = f", {warm['failed']} failed: {warm['first_error']}" if warm["failed"] else ""
        state.log(f"[{mode}] warm-up: {warm['requests']} requests in {warm['seconds']}s{failed}")
    state.save()


def _run_all(state: RunState) -> int:
    """Start the servers and the runner, write the workloads, run every point."""
    cfg, raw = state.cfg, state.raw

    def while_loading() -> None:  # vLLM's bench imports and the files, while servers load
        state.launch_runner()
        state.prepared = prepare_all(cfg, state.log)
        state.save()

    try:
        start_servers(state, while_loading)
        assert state.runner is not None
        state.runner.wait_ready(timeout=cfg.server_timeout)
        if cfg.warmup_requests:
            _warm_up_all(state)
        for repeat in range(cfg.repeats):
            for index, spec in enumerate(cfg.points):
                run_point(state, spec, repeat, index)
    except (ServerError, BenchError, OSError) as e:
        raw["error"] = str(e)[-4000:]
        state.log(f"ERROR: {e}")
        _skip_rest(state, f"not run: {str(e).splitlines()[0][:200]}")
        raw["status"] = "errors"
        return 1
    status = 1 if _failed(raw) else 0
    raw["status"] = "done" if status == 0 else "errors"
    return status


def _cleanup(state: RunState) -> None:
    """Stop the runner and every server (Ctrl-C held off meanwhile)."""
    runner, state.runner = state.runner, None
    if runner is not None:
        with shielded(state.log):
            runner.stop()
    _stop_servers(state)


def _report(state: RunState, status: int) -> int:
    out = state.cfg.out
    state.log(f"raw data: {out / 'raw.json'}")
    if not state.cfg.report or not state.raw["runs"]:
        return status
    from proxima_bench.serving.matrix_report import write_report

    try:
        path = write_report([out], out / "report.md")
        state.log(f"report: {path}")
    except Exception as e:  # noqa: BLE001 - keep raw.json even if the report fails
        state.log(f"report failed: {type(e).__name__}: {e}")
        return status or 1
    return status


def list_points() -> str:
    """The point table for ``--list-points``."""
    width = max(len(n) for n in POINT_NAMES)
    return "\n".join(f"{p.name:<{width}}  {p.description}" for p in POINTS)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-points" in argv:
        print(list_points())
        return 0
    try:
        cfg = resolve(argv)
    except MatrixError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _raw, status = run_matrix(cfg)
    return status


if __name__ == "__main__":
    sys.exit(main())
