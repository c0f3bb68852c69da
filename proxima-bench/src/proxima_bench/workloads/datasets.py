"""Seeded serving workloads written as vLLM ``custom`` JSONL datasets.

Prompt text is built from whole-word vocabulary tokens sampled with a seeded
RNG, decoded, re-encoded and adjusted until ``len(tokenizer(prompt).input_ids)``
equals the target exactly (what ``vllm bench serve``'s custom dataset and the
server count). Lengths come from ``seed``; token content from ``content_seed``
(default: ``seed``), so a sweep can use the same lengths with fresh prompts at
every point (no prefix-cache hits carried from one point to the next), while
the shared system prompts stay fixed by ``seed``.

CLI: ``python -m proxima_bench.workloads NAME --num N --tokenizer PATH
--out FILE.jsonl`` (``--lengths-only`` needs no tokenizer).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from proxima_bench.workloads.lengths import (
    WORKLOAD_NAMES,
    Chat,
    Request,
    SharedSystem,
    Workload,
    WorkloadError,
    length_summary,
    make_workload,
)

# --------------------------------------------------------------------------
# token-exact prompt text
# --------------------------------------------------------------------------


class TokenizerLike(Protocol):
    """The slice of a Hugging Face tokenizer this module uses."""

    all_special_ids: list[int]

    def __call__(self, text: str, add_special_tokens: bool = True) -> Any: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...

    def __len__(self) -> int: ...


_WORD_MARKERS = ("\u0120", "\u2581")  # byte-level BPE 'Ġ', sentencepiece '▁'


class PromptBuilder:
    """Builds prompt text whose token count is exactly a target.

    Args:
        tokenizer: a Hugging Face tokenizer (the served model's).
        max_attempts: adjustment rounds before giving up on one prompt.
    """

    def __init__(self, tokenizer: TokenizerLike, max_attempts: int = 64) -> None:
        self.tokenizer = tokenizer
        self.max_attempts = max_attempts
        self.num_special = len(self._ids("hello")) - len(self._ids("hello", False))
        self.pool = self._word_pool()

    def _ids(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special).input_ids)

    def _word_pool(self) -> np.ndarray:
        special = set(self.tokenizer.all_special_ids)
        ids = [i for i in range(len(self.tokenizer)) if i not in special]
        tokens = self.tokenizer.convert_ids_to_tokens(ids)
        words = [
            i
            for i, tok in zip(ids, tokens, strict=True)
            if isinstance(tok, str)
            and len(tok) >= 3
            and tok[0] in _WORD_MARKERS
            and tok[1:].isascii()
            and tok[1:].isalpha()
        ]
        stable = [i for i in words if self._ids(self.tokenizer.decode([i, i]), False) == [i, i]]
        if len(stable) >= 32:
            return np.asarray(stable, dtype=np.int64)
        # Unusual tokenizer: any non-special token; the adjust loop copes.
        return np.asarray(ids, dtype=np.int64)

    def text(self, target: int, rng: np.random.Generator, prefix: str = "") -> str:
        """Text ``t`` with ``len(tokenizer(prefix + t).input_ids) == target``.

        Args:
            target: total tokens wanted (special tokens included).
            rng: the seeded generator to draw words from.
            prefix: fixed text the result is appended to (a shared prefix).

        Raises:
            WorkloadError: target too small, or no exact text found.
        """
        have = len(self._ids(prefix)) if prefix else self.num_special
        need = target - have
        if need < 1:
            raise WorkloadError(
                f"cannot build a {target}-token prompt: the prefix alone has {have}"
            )
        ids = [int(x) for x in rng.choice(self.pool, size=need)]
        for _ in range(self.max_attempts):
            suffix = self.tokenizer.decode(ids)
            if prefix and suffix and not suffix[0].isspace() and not prefix[-1].isspace():
                suffix = " " + suffix
            got = len(self._ids(prefix + suffix))
            if got == target:
                return suffix
            diff = target - got
            if diff > 0:
                ids += [int(x) for x in rng.choice(self.pool, size=diff)]
            elif len(ids) > -diff:
                ids = ids[:diff]
            else:
                ids = [int(x) for x in rng.choice(self.pool, size=1)]
        raise WorkloadError(
            f"could not build a prompt of exactly {target} tokens in "
            f"{self.max_attempts} attempts (tokenizer merges across words?)"
        )


def load_tokenizer(path: str | Path) -> TokenizerLike:
    """The Hugging Face tokenizer in a local model folder (no network).

    Raises:
        WorkloadError: the folder does not exist.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise WorkloadError(f"tokenizer folder {folder} does not exist (local paths only)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return cast(TokenizerLike, tokenizer)


@dataclass
class WorkloadFile:
    """A written dataset: where, what, and its lengths."""

    path: Path
    requests: list[Request]
    params: dict[str, Any]
    seed: int
    content_seed: int

    def summary(self) -> dict[str, Any]:
        """Counts and means of the lengths, JSON-serialisable."""
        return length_summary(self.requests)


def write_dataset(
    workload: Workload,
    num: int,
    tokenizer: TokenizerLike,
    out: str | Path,
    seed: int = 0,
    content_seed: int | None = None,
    system_seed: int | None = None,
) -> WorkloadFile:
    """Sample ``num`` requests and write them as a vLLM ``custom`` JSONL dataset.

    Each line is ``{"prompt", "output_tokens", "prompt_len", "group",
    "prefix_len", "kind"}``; vLLM reads ``prompt`` and ``output_tokens`` (run
    its bench with ``--dataset-name custom --custom-output-len -1
    --skip-chat-template --disable-shuffle --ignore-eos``).

    Args:
        workload: the length distribution.
        num: number of requests (>= 1).
        tokenizer: the served model's tokenizer.
        out: the ``.jsonl`` path to write (parent folders are created).
        seed: seed of the lengths (and of shared system prompts).
        content_seed: seed of the prompt words; default ``seed``.
        system_seed: seed of the shared-system workload's system prompt words;
            default ``seed`` (fixed across content seeds). Chat system parts
            come from ``content_seed``.

    Raises:
        WorkloadError: bad arguments or no exact prompt text.
    """
    if num < 1:
        raise WorkloadError(f"need at least one request; got {num}")
    out = Path(out)
    if out.suffix != ".jsonl":
        raise WorkloadError(f"vLLM's custom dataset needs a .jsonl file; got {out}")
    content_seed = seed if content_seed is None else content_seed
    requests = workload.sample(num, seed)
    builder = PromptBuilder(tokenizer)
    rng = np.random.default_rng([content_seed, 2])
    if isinstance(workload, Chat):
        prompts = _chat_prompts(requests, builder, rng)
    else:
        systems: dict[int, str] = {}
        if isinstance(workload, SharedSystem):
            sys_rng = np.random.default_rng([seed if system_seed is None else system_seed, 3])
            for g, length in enumerate(workload.system_lengths(seed)):
                systems[g] = builder.text(length, sys_rng)
        prompts = []
        for req in requests:
            prefix = systems.get(req.group, "") if req.group is not None else ""
            prompts.append(prefix + builder.text(req.prompt_len, rng, prefix=prefix))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for req, prompt in zip(requests, prompts, strict=True):
            line = {
                "prompt": prompt,
                "output_tokens": req.output_len,
                "prompt_len": req.prompt_len,
                "group": req.group,
                "prefix_len": req.prefix_len,
                "kind": req.kind,
            }
            f.write(json.dumps(line) + "\n")
    tmp.replace(out)
    return WorkloadFile(out, requests, workload.params(), seed, content_seed)


def _chat_prompts(
    requests: Sequence[Request], builder: PromptBuilder, rng: np.random.Generator
) -> list[str]:
    """Prompt text of :class:`Chat` requests (ordered by turn, see ``Chat.sample``).

    A conversation's text grows turn by turn: system part (its first request's
    ``prefix_len`` tokens), then per turn the user part (the request's prompt
    ends there) and an assistant part of the request's output length.
    """
    history: dict[int, str] = {}  # conversation -> text up to its next user part
    prompts = []
    for req in requests:
        if req.group is None:
            raise WorkloadError("chat requests need a conversation (group)")
        text = history.get(req.group)
        if text is None:
            text = builder.text(req.prefix_len, rng)
        prompt = text + builder.text(req.prompt_len, rng, prefix=text)
        prompts.append(prompt)
        total = req.prompt_len + req.output_len
        history[req.group] = prompt + builder.text(total, rng, prefix=prompt)
    return prompts


def read_lengths(path: str | Path) -> list[Request]:
    """The requests' lengths from a JSONL written by :func:`write_dataset`.

    Lines without ``prompt_len`` (other custom datasets) are rejected, since
    their token counts depend on a tokenizer.

    Raises:
        WorkloadError: missing file or fields.
    """
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"workload file {path} does not exist")
    requests = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            item = json.loads(line)
            if "prompt_len" not in item or "output_tokens" not in item:
                raise WorkloadError(
                    f"{path}:{n}: need 'prompt_len' and 'output_tokens' fields "
                    "(files written by proxima_bench.workloads have them)"
                )
            group = item.get("group")
            requests.append(
                Request(
                    int(item["prompt_len"]),
                    int(item["output_tokens"]),
                    None if group is None else int(group),
                    int(item.get("prefix_len") or 0),
                    item.get("kind"),
                )
            )
    if not requests:
        raise WorkloadError(f"workload file {path} is empty")
    return requests


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write one workload file (or print its lengths)."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_bench.workloads",
        description="Write a seeded workload as a vLLM custom JSONL dataset.",
    )
    parser.add_argument("name", choices=WORKLOAD_NAMES)
    parser.add_argument("--num", type=int, default=100, help="requests (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--content-seed", type=int, default=None)
    parser.add_argument("--scale", type=float, default=1.0, help="length multiplier")
    parser.add_argument("--max-total-len", type=int, default=None)
    parser.add_argument("--tokenizer", help="local model/tokenizer folder")
    parser.add_argument("--out", help="output .jsonl")
    parser.add_argument("--lengths-only", action="store_true", help="print a length summary only")
    args = parser.parse_args(argv)
    try:
        workload = make_workload(args.name, args.scale, args.max_total_len)
        if args.lengths_only:
            summary = length_summary(workload.sample(args.num, args.seed))
            print(json.dumps({"params": workload.params(), **summary}, indent=2))
            return 0
        if not args.tokenizer or not args.out:
            parser.error("--tokenizer and --out are needed unless --lengths-only")
        written = write_dataset(
            workload,
            args.num,
            load_tokenizer(args.tokenizer),
            args.out,
            args.seed,
            args.content_seed,
        )
    except WorkloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {written.path}: {json.dumps(written.summary())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
