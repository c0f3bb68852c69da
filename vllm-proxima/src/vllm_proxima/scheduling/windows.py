"""Sliding-window pages in the projection: each request's bound before and after its prompt.

A sliding-window group holds at most
:meth:`~vllm_proxima.kv.residency.KVShape.window_pages` of a request: a prompt chunk's
bound (``prefill_step``) while the prompt goes in and until the allocation after its
last chunk, a decode step's (``decode_step``) from then on. Admission charges every
request ``high`` window pages before step ``until`` and ``low`` from then on
(:func:`~vllm_proxima.scheduling.projection.windowed_peak`). ``until`` counts the step
of the allocation that frees the prompt's pages: requests allocated before it in that
step still find them held.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from vllm_proxima.scheduling.projection import Placement, windowed_peak

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.residency import KVShape
    from vllm_proxima.scheduling.curve import Curve


def resident_windows(
    shape: KVShape,
    now: np.ndarray | None,
    total: np.ndarray,
    computed: np.ndarray,
    final: np.ndarray,
    chunks: np.ndarray,
    lookahead: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, high, until)`` of the residents.

    Args:
        shape: the KV cache groups.
        now: window pages each holds now (``None``: none read).
        total, computed: each one's tokens and computed tokens.
        final: the most tokens each can reach (prompt and ``max_tokens``, capped by
            the model length).
        chunks: steps each one's prompt still takes (0: decoding).
        lookahead: speculative slots reserved per request.
    """
    low = np.asarray(shape.window_pages(final + lookahead, shape.decode_step), dtype=np.int64)
    held = now if now is not None else np.zeros_like(total)
    # A decoding request has one token not computed yet (the one it samples).
    prefilling = total - computed > 1
    prompt = shape.window_pages(total + shape.decode_step, shape.prefill_step)
    high = np.maximum(np.where(prefilling, np.maximum(held, prompt), held), low)
    # Pages held now above ``low`` (a chunk still in flight): until its allocation, too.
    until = np.where(prefilling, chunks + shape.batches, shape.batches + 1)
    return low, high, until


def candidate_windows(
    shape: KVShape,
    request: Request,
    computed: int,
    queued: int,
    chunk_tokens: int,
    max_model_len: int,
    lookahead: int,
) -> tuple[int, int, int]:
    """``(low, high, until)`` of a waiting request with ``computed`` tokens cached,
    behind ``queued`` prompt tokens (the step budget, ``chunk_tokens``, serves them in
    order)."""
    final = min(request.num_prompt_tokens + request.max_tokens, max_model_len)
    low = int(shape.window_pages(final + lookahead, shape.decode_step))
    left = max(request.num_tokens - computed, 0)
    if left <= 1:
        return low, low, 0
    pages = int(shape.window_pages(request.num_tokens + shape.decode_step, shape.prefill_step))
    chunks = -(-(queued + left) // chunk_tokens)
    return low, max(pages, low), chunks + shape.batches


def worst_window_pages(shape: KVShape, tokens: int) -> int:
    """Most window pages a request reaching ``tokens`` (lookahead included) can hold
    at once: the prefill bound, never below the decode one."""
    step = shape.decode_step
    return int(shape.window_pages(tokens + step, max(shape.prefill_step, step)))


def worst_pages(tokens: int, page_size: int, shape: KVShape | None) -> int:
    """Most pages a request reaching ``tokens`` (lookahead included) can hold at once:
    every full group at its last token, windows (``shape``; ``None``: one full group)
    at their prefill bound."""
    if shape is None:
        return -(-tokens // page_size)
    return shape.full * -(-tokens // page_size) + worst_window_pages(shape, tokens)


class Windows:
    """The window bounds admission holds for one step: the residents', read once, and
    each admitted candidate's appended (:meth:`candidate`, then :meth:`admit`)."""

    def __init__(
        self, shape: KVShape, chunk_tokens: int, max_model_len: int, lookahead: int
    ) -> None:
        self.shape = shape
        self.chunk_tokens = chunk_tokens
        self.max_model_len = max_model_len
        self.lookahead = lookahead
        self.low = self.high = self.until = np.zeros(0, dtype=np.int64)
        self._next: tuple[int, int, int] | None = None  # the candidate placed last
        # The last step before which some resident holds its prompt's window pages
        # (``high > low``; 0: none): until then the peak can fall without a departure.
        self.last_transient = 0

    def transient(self, start: int = 0) -> bool:
        """Whether some resident still holds its prompt's window pages ``start`` steps
        after the residents were read."""
        return self.last_transient > start

    def residents(
        self,
        now: np.ndarray | None,
        total: np.ndarray,
        computed: np.ndarray,
        prompts: np.ndarray,
        max_tokens: np.ndarray,
        chunks: np.ndarray,
    ) -> None:
        """Read the residents (see :func:`resident_windows`)."""
        final = np.minimum(prompts + max_tokens, self.max_model_len)
        self.low, self.high, self.until = resident_windows(
            self.shape, now, total, computed, final, chunks, self.lookahead
        )
        late = self.high > self.low
        self.last_transient = int(self.until[late].max()) if late.any() else 0

    def candidate(self, request: Request, computed: int, queued: int) -> int:
        """Place a candidate (see :func:`candidate_windows`); returns its ``low``, the
        fewest window pages it holds at step 0."""
        low, high, until = candidate_windows(
            self.shape,
            request,
            computed,
            queued,
            self.chunk_tokens,
            self.max_model_len,
            self.lookahead,
        )
        self._next = (low, high, until)
        return low

    def _with_next(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self._next is not None
        low, high, until = self._next
        return np.append(self.low, low), np.append(self.high, high), np.append(self.until, until)

    def peak(self, held: np.ndarray, remaining: np.ndarray) -> int:
        """The peak of the residents and the candidate placed last (``held``,
        ``remaining``: theirs, the candidate's last)."""
        return windowed_peak(held, remaining, self.shape, *self._with_next())

    def prepare(self, held: np.ndarray, remaining: np.ndarray) -> Placement:
        """The residents' :class:`Placement` (``held``, ``remaining``: theirs), with
        their window bounds as the ``low`` and ``high`` fixed pages."""
        fixed = {"low": self.low, "high": self.high}
        return Placement.of(held, remaining, self.shape.page_size, self.shape.full, fixed)

    def placed_peak(
        self,
        placement: Placement,
        held: int,
        remaining: int,
        cut: int = -1,
        start: int = 0,
        curve: Curve | None = None,
        cap: int | None = None,
    ) -> int:
        """:meth:`peak` with the candidate placed among the residents prepared in
        ``placement`` (``held`` tokens, ``remaining`` steps: the candidate's), from step
        ``start`` of the placement on (the steps since the residents were read: the
        candidate is given in the placement's steps, its ``until`` counts from now),
        every remaining step cut at ``cut`` when ``cut >= 0`` (the horizon); ``curve``:
        the placement's ``low`` curve for that cut and start; with ``cap``, a steady
        part over it is returned alone (the transient part can only add)."""
        assert self._next is not None
        low, high, until = self._next
        if curve is not None:
            steady = curve.peak(held, remaining, low)
        else:
            steady = placement.peak(held, remaining, low, "low", cut=cut, start=start)
        last = max(self.last_transient, until + start if high > low else 0)
        if cap is not None and steady > cap:
            return steady
        if last - 1 >= start:  # someone holds its prompt's window pages before ``last``
            early = last - 1 if cut < 0 else min(cut, last - 1)
            transient = placement.peak(held, remaining, high, "high", cut=early, start=start)
            return max(steady, transient)
        return steady

    def placed_fixed(self) -> dict[str, int]:
        """The candidate placed last's window pages, as :meth:`prepare`'s placement
        names them (for ``Placement.insert``): call before :meth:`admit`."""
        assert self._next is not None
        low, high, _until = self._next
        return {"low": low, "high": high}

    def admit(self, start: int = 0) -> None:
        """The candidate placed last is admitted ``start`` steps after the residents
        were read: it joins them, its ``until`` in their steps."""
        assert self._next is not None
        low, high, until = self._next
        self._next = (low, high, until + start)
        self.low, self.high, self.until = self._with_next()
        if high > low:
            self.last_transient = max(self.last_transient, until + start)
        self._next = None

    def fixed_of(self, row: int) -> dict[str, int]:
        """Row ``row``'s window pages, as :meth:`prepare`'s placement names them (for
        ``Placement.remove``)."""
        return {"low": int(self.low[row]), "high": int(self.high[row])}

    def leave(self, row: int, rows: Iterable[int]) -> None:
        """Row ``row`` departed, ``rows`` are the rows still resident: the last step of
        a prompt's window pages is theirs alone again."""
        if self.high[row] <= self.low[row] or self.until[row] < self.last_transient:
            return  # not the row that set it
        live = np.fromiter(rows, dtype=np.int64)
        late = live[self.high[live] > self.low[live]]
        self.last_transient = int(self.until[late].max()) if late.size else 0
