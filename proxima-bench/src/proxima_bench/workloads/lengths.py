"""The workload-length model every bench shares: seeded request-length distributions.

Workloads (lengths are in tokens *as the server counts them*, i.e. the
prompt length includes the special tokens the tokenizer adds, such as BOS):

``baseline``
    prompts ~ U[50, 200], outputs ~ U[32, 256] (integers, both ends included).
``sharegpt``
    ShareGPT-like log-normal lengths: prompt ~ LogNormal(mu=4.583, sigma=1.0)
    clipped to [4, 2048]; output ~ LogNormal(mu=5.503, sigma=0.8) clipped to
    [4, 1024], rounded to integers. mu is chosen so the unclipped means are
    the ShareGPT figures of the vLLM paper (Kwon et al., 2023, Table 1 / Fig.
    11: mean input 161.31, mean output 337.99 tokens): mean = exp(mu +
    sigma^2 / 2), so mu = ln(mean) - sigma^2 / 2. Medians are 98 and 245.
``shared-system``
    chat with shared system prompts: 8 system prompts of U[200, 1000] tokens
    (fixed by the seed), each request picks one uniformly and appends a user
    part of U[20, 200] tokens; outputs ~ U[32, 256]. The prompt is the plain
    concatenation (no chat template), so every request of a group shares the
    system prompt's tokens as an exact prefix (what prefix caching can reuse).
``long-prompt``
    prompts ~ U[1500, 3000], outputs ~ U[16, 64] (prefill-heavy).
``long-output``
    prompts ~ U[50, 200], outputs ~ U[1000, 2000] (decode-heavy).
``mixed``
    one shuffled stream: 90 % ``baseline`` requests (class ``short``) and 10 %
    ``long-prompt`` requests (class ``long``; exactly ``round(0.1 n)`` of them).
    Each line's ``kind`` says its class.
``chat``
    multi-turn chats of 4 turns. Per conversation a system part of U[200, 400]
    tokens; turn t's prompt is the system part, then for every earlier turn its
    user part (U[20, 100]) and a synthetic assistant part as long as that
    turn's output (U[32, 256]), then the new user part. Requests are ordered by
    turn (every conversation's turn 1, then every turn 2, ...); ``n`` requests
    are ``ceil(n / 4)`` conversations cut to ``n``. Each prompt is the previous
    turn's prompt plus text, so it shares that prompt's tokens as an exact
    prefix (``prefix_len``; turn 1: the system part). ``kind`` is ``turn-T``.

All outputs are meant to be generated with ``ignore_eos`` so they run to their
length. ``scale`` multiplies every length parameter (log-normal: the median)
for small CPU runs; ``max_total_len`` caps prompt + output (outputs are cut
first) so no request exceeds the server's ``--max-model-len``.

The prompt text and the JSONL files are :mod:`proxima_bench.workloads.datasets`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

WORKLOAD_NAMES = (
    "baseline",
    "sharegpt",
    "shared-system",
    "long-prompt",
    "long-output",
    "mixed",
    "chat",
)

# The vLLM paper's ShareGPT statistics the log-normal parameters reproduce.
SHAREGPT_MEAN_PROMPT = 161.31
SHAREGPT_MEAN_OUTPUT = 337.99
SHAREGPT_PROMPT_SIGMA = 1.0
SHAREGPT_OUTPUT_SIGMA = 0.8
# mu = ln(mean) - sigma^2 / 2 gives a log-normal with that mean.
SHAREGPT_PROMPT_MU = math.log(SHAREGPT_MEAN_PROMPT) - SHAREGPT_PROMPT_SIGMA**2 / 2
SHAREGPT_OUTPUT_MU = math.log(SHAREGPT_MEAN_OUTPUT) - SHAREGPT_OUTPUT_SIGMA**2 / 2


class WorkloadError(ValueError):
    """A workload cannot be built as asked (bad parameters, tokenizer trouble)."""


@dataclass(frozen=True)
class Request:
    """Lengths of one benchmark request.

    Attributes:
        prompt_len: prompt tokens as the server counts them (special tokens
            included).
        output_len: output tokens to generate (sent as ``max_tokens``).
        group: system-prompt index for the shared-system workload, else None.
        prefix_len: leading prompt tokens shared with the other requests of
            ``group`` (special tokens included); 0 when nothing is shared.
        kind: the request's class where a workload has several (``mixed``:
            ``short`` / ``long``; ``chat``: ``turn-T``), else None.
    """

    prompt_len: int
    output_len: int
    group: int | None = None
    prefix_len: int = 0
    kind: str | None = None


class Workload(Protocol):
    """A request-length distribution."""

    @property
    def name(self) -> str:
        """The workload's name."""
        ...

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed."""
        ...

    def scaled(self, factor: float) -> Workload:
        """The same workload with every length parameter times ``factor``."""
        ...

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        ...


def _scale_range(bounds: tuple[int, int], factor: float) -> tuple[int, int]:
    lo = max(1, round(bounds[0] * factor))
    return lo, max(lo, round(bounds[1] * factor))


def draw_uniform(rng: np.random.Generator, bounds: tuple[int, int], n: int) -> np.ndarray:
    """``n`` integer lengths ~ U[lo, hi], both ends included (one ``rng.integers`` call).

    Every bench draws uniform lengths through here (serving datasets, token-id
    workloads, the simulator, the planner), so one seed gives one set of lengths.

    Raises:
        WorkloadError: not ``1 <= lo <= hi``.
    """
    lo, hi = bounds
    if not 1 <= lo <= hi:
        raise WorkloadError(f"bad length range [{lo}, {hi}]: need 1 <= lo <= hi")
    return rng.integers(lo, hi + 1, size=n)


def _cap(prompt: int, output: int, max_total_len: int | None) -> tuple[int, int, bool]:
    """Cap ``prompt + output`` at ``max_total_len``: output first, then prompt."""
    if max_total_len is None or prompt + output <= max_total_len:
        return prompt, output, False
    prompt = min(prompt, max_total_len - 1)
    return prompt, max(1, min(output, max_total_len - prompt)), True


@dataclass(frozen=True)
class Baseline:
    """Uniform prompt and output lengths (both ends included)."""

    prompt: tuple[int, int] = (50, 200)
    output: tuple[int, int] = (32, 256)
    max_total_len: int | None = None
    name: str = "baseline"

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed."""
        rng = np.random.default_rng(seed)
        prompts = draw_uniform(rng, self.prompt, n)
        outputs = draw_uniform(rng, self.output, n)
        return [
            Request(*_cap(int(p), int(o), self.max_total_len)[:2])
            for p, o in zip(prompts, outputs, strict=True)
        ]

    def scaled(self, factor: float) -> Baseline:
        """The same workload with every length parameter times ``factor``."""
        return dataclasses.replace(
            self,
            prompt=_scale_range(self.prompt, factor),
            output=_scale_range(self.output, factor),
        )

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "name": self.name,
            "prompt": {"dist": "uniform", "min": self.prompt[0], "max": self.prompt[1]},
            "output": {"dist": "uniform", "min": self.output[0], "max": self.output[1]},
            "max_total_len": self.max_total_len,
        }


@dataclass(frozen=True)
class LogNormal:
    """A rounded, clipped log-normal length: round(exp(N(mu, sigma))) in [lo, hi]."""

    mu: float
    sigma: float
    lo: int
    hi: int

    @classmethod
    def from_mean(cls, mean: float, sigma: float, lo: int, hi: int) -> LogNormal:
        """The log-normal with this (unclipped) mean: mu = ln(mean) - sigma^2/2."""
        return cls(math.log(mean) - sigma * sigma / 2.0, sigma, lo, hi)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer draws."""
        if self.sigma < 0 or not 1 <= self.lo <= self.hi:
            raise WorkloadError(f"bad log-normal parameters {self}")
        values = np.rint(rng.lognormal(self.mu, self.sigma, size=n))
        return np.clip(values, self.lo, self.hi).astype(np.int64)

    def scaled(self, factor: float) -> LogNormal:
        """Median and bounds times ``factor``."""
        lo, hi = _scale_range((self.lo, self.hi), factor)
        return LogNormal(self.mu + math.log(factor), self.sigma, lo, hi)

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "dist": "lognormal",
            "mu": round(self.mu, 6),
            "sigma": self.sigma,
            "min": self.lo,
            "max": self.hi,
            "median": round(math.exp(self.mu), 2),
            "mean_unclipped": round(math.exp(self.mu + self.sigma**2 / 2), 2),
        }


@dataclass(frozen=True)
class ShareGPTLike:
    """ShareGPT-like log-normal prompt and output lengths (see module doc)."""

    prompt: LogNormal = LogNormal(SHAREGPT_PROMPT_MU, SHAREGPT_PROMPT_SIGMA, 4, 2048)
    output: LogNormal = LogNormal(SHAREGPT_OUTPUT_MU, SHAREGPT_OUTPUT_SIGMA, 4, 1024)
    max_total_len: int | None = None
    name: str = "sharegpt"

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed."""
        rng = np.random.default_rng(seed)
        prompts = self.prompt.draw(rng, n)
        outputs = self.output.draw(rng, n)
        return [
            Request(*_cap(int(p), int(o), self.max_total_len)[:2])
            for p, o in zip(prompts, outputs, strict=True)
        ]

    def scaled(self, factor: float) -> ShareGPTLike:
        """The same workload with every length parameter times ``factor``."""
        return dataclasses.replace(
            self, prompt=self.prompt.scaled(factor), output=self.output.scaled(factor)
        )

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "name": self.name,
            "prompt": self.prompt.params(),
            "output": self.output.params(),
            "max_total_len": self.max_total_len,
        }


@dataclass(frozen=True)
class SharedSystem:
    """Shared-system-prompt chat (see module doc).

    ``system`` counts the system prompt's tokens including the tokenizer's
    special prefix (BOS); ``user`` the appended user part.
    """

    num_systems: int = 8
    system: tuple[int, int] = (200, 1000)
    user: tuple[int, int] = (20, 200)
    output: tuple[int, int] = (32, 256)
    max_total_len: int | None = None
    name: str = "shared-system"

    def system_lengths(self, seed: int) -> list[int]:
        """The system prompts' lengths (fixed by the seed)."""
        if self.num_systems < 1:
            raise WorkloadError("num_systems must be >= 1")
        rng = np.random.default_rng([seed, 1])
        return [int(x) for x in draw_uniform(rng, self.system, self.num_systems)]

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed."""
        systems = self.system_lengths(seed)
        if self.max_total_len is not None and max(systems) + 2 > self.max_total_len:
            raise WorkloadError(
                f"a system prompt of {max(systems)} tokens leaves no room for a "
                f"user part and an output within max_total_len={self.max_total_len};"
                " scale the workload down (--scale) or raise --max-model-len"
            )
        rng = np.random.default_rng(seed)
        groups = rng.integers(0, self.num_systems, size=n)
        users = draw_uniform(rng, self.user, n)
        outputs = draw_uniform(rng, self.output, n)
        requests = []
        for g, u, o in zip(groups, users, outputs, strict=True):
            sys_len = systems[int(g)]
            prompt, output, _ = _cap(sys_len + int(u), int(o), self.max_total_len)
            prompt = max(prompt, sys_len + 1)
            requests.append(Request(prompt, output, group=int(g), prefix_len=sys_len))
        return requests

    def scaled(self, factor: float) -> SharedSystem:
        """The same workload with every length parameter times ``factor``."""
        return dataclasses.replace(
            self,
            system=_scale_range(self.system, factor),
            user=_scale_range(self.user, factor),
            output=_scale_range(self.output, factor),
        )

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "name": self.name,
            "num_systems": self.num_systems,
            "system": {"dist": "uniform", "min": self.system[0], "max": self.system[1]},
            "user": {"dist": "uniform", "min": self.user[0], "max": self.user[1]},
            "output": {"dist": "uniform", "min": self.output[0], "max": self.output[1]},
            "max_total_len": self.max_total_len,
        }


LONG_PROMPT = Baseline(prompt=(1500, 3000), output=(16, 64), name="long-prompt")
LONG_OUTPUT = Baseline(prompt=(50, 200), output=(1000, 2000), name="long-output")


def _tagged(requests: Sequence[Request], kind: str) -> list[Request]:
    return [dataclasses.replace(r, kind=kind) for r in requests]


@dataclass(frozen=True)
class Mixed:
    """One shuffled stream of ``short`` and ``long`` requests (see module doc).

    Exactly ``round(long_fraction * n)`` of ``n`` requests are long; the
    classes are drawn from their own workloads and the order is a seeded
    permutation.
    """

    short: Baseline = Baseline()
    long: Baseline = LONG_PROMPT
    long_fraction: float = 0.1
    max_total_len: int | None = None
    name: str = "mixed"

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed."""
        if not 0.0 <= self.long_fraction <= 1.0:
            raise WorkloadError(f"long_fraction must be in [0, 1]; got {self.long_fraction}")
        rng = np.random.default_rng([seed, 4])
        num_long = round(n * self.long_fraction)
        long_seed = int(rng.integers(2**31))
        short = dataclasses.replace(self.short, max_total_len=self.max_total_len)
        long = dataclasses.replace(self.long, max_total_len=self.max_total_len)
        requests = _tagged(short.sample(n - num_long, seed), "short")
        requests += _tagged(long.sample(num_long, long_seed), "long")
        return [requests[int(i)] for i in rng.permutation(n)]

    def scaled(self, factor: float) -> Mixed:
        """The same workload with every length parameter times ``factor``."""
        return dataclasses.replace(
            self, short=self.short.scaled(factor), long=self.long.scaled(factor)
        )

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "name": self.name,
            "long_fraction": self.long_fraction,
            "short": self.short.params(),
            "long": self.long.params(),
            "max_total_len": self.max_total_len,
        }


@dataclass(frozen=True)
class Chat:
    """Multi-turn chats with growing histories (see module doc)."""

    turns: int = 4
    system: tuple[int, int] = (200, 400)
    user: tuple[int, int] = (20, 100)
    output: tuple[int, int] = (32, 256)
    max_total_len: int | None = None
    name: str = "chat"

    def conversations(self, n: int) -> int:
        """How many conversations ``n`` requests need."""
        if self.turns < 1:
            raise WorkloadError(f"turns must be >= 1; got {self.turns}")
        return max(1, math.ceil(n / self.turns))

    def sample(self, n: int, seed: int) -> list[Request]:
        """Draw ``n`` requests' lengths with a fixed seed (ordered by turn)."""
        convs = self.conversations(n)
        rng = np.random.default_rng(seed)
        systems = draw_uniform(rng, self.system, convs)
        users = draw_uniform(rng, self.user, convs * self.turns).reshape(convs, self.turns)
        outputs = draw_uniform(rng, self.output, convs * self.turns).reshape(convs, self.turns)
        requests = []
        history = [int(x) for x in systems]  # tokens before each conversation's next user part
        previous = list(history)  # each conversation's previous prompt (turn 1: the system part)
        for turn in range(self.turns):
            for c in range(convs):
                prompt = history[c] + int(users[c, turn])
                output = int(outputs[c, turn])
                requests.append(Request(prompt, output, c, previous[c], f"turn-{turn + 1}"))
                previous[c] = prompt
                history[c] = prompt + output
        requests = requests[:n]
        longest = max((r.prompt_len + r.output_len for r in requests), default=0)
        if self.max_total_len is not None and longest > self.max_total_len:
            raise WorkloadError(
                f"a chat turn of {longest} tokens (prompt + output) exceeds "
                f"max_total_len={self.max_total_len}; scale the workload down (--scale) "
                "or raise --max-model-len"
            )
        return requests

    def scaled(self, factor: float) -> Chat:
        """The same workload with every length parameter times ``factor``."""
        return dataclasses.replace(
            self,
            system=_scale_range(self.system, factor),
            user=_scale_range(self.user, factor),
            output=_scale_range(self.output, factor),
        )

    def params(self) -> dict[str, Any]:
        """The parameters, JSON-serialisable."""
        return {
            "name": self.name,
            "turns": self.turns,
            "system": {"dist": "uniform", "min": self.system[0], "max": self.system[1]},
            "user": {"dist": "uniform", "min": self.user[0], "max": self.user[1]},
            "output": {"dist": "uniform", "min": self.output[0], "max": self.output[1]},
            "max_total_len": self.max_total_len,
        }


def make_workload(name: str, scale: float = 1.0, max_total_len: int | None = None) -> Workload:
    """A workload by name, scaled and capped.

    Args:
        name: one of :data:`WORKLOAD_NAMES`.
        scale: multiplies every length parameter (> 0).
        max_total_len: cap on prompt + output tokens per request, or None.

    Raises:
        WorkloadError: unknown name or bad scale.
    """
    if not scale > 0:
        raise WorkloadError(f"scale must be > 0; got {scale}")
    base: Workload
    if name == "baseline":
        base = Baseline(max_total_len=max_total_len)
    elif name == "sharegpt":
        base = ShareGPTLike(max_total_len=max_total_len)
    elif name == "shared-system":
        base = SharedSystem(max_total_len=max_total_len)
    elif name == "long-prompt":
        base = dataclasses.replace(LONG_PROMPT, max_total_len=max_total_len)
    elif name == "long-output":
        base = dataclasses.replace(LONG_OUTPUT, max_total_len=max_total_len)
    elif name == "mixed":
        base = Mixed(max_total_len=max_total_len)
    elif name == "chat":
        base = Chat(max_total_len=max_total_len)
    else:
        raise WorkloadError(f"unknown workload {name!r}; choose from {', '.join(WORKLOAD_NAMES)}")
    return base if scale == 1.0 else base.scaled(scale)


def length_summary(requests: Sequence[Request]) -> dict[str, Any]:
    """Number of requests and min / mean / max of prompt and output lengths."""
    if not requests:
        return {"num_requests": 0}
    prompts = np.array([r.prompt_len for r in requests])
    outputs = np.array([r.output_len for r in requests])
    return {
        "num_requests": len(requests),
        "prompt_len": {
            "min": int(prompts.min()),
            "mean": round(float(prompts.mean()), 2),
            "max": int(prompts.max()),
        },
        "output_len": {
            "min": int(outputs.min()),
            "mean": round(float(outputs.mean()), 2),
            "max": int(outputs.max()),
        },
    }
