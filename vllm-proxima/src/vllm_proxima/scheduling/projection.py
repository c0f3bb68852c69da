"""The projected peak: the most pages resident requests will hold at once.

Request ``i`` holding ``c_i`` tokens with ``r_i`` decode steps to go holds
``ceil((c_i + k) / B)`` pages ``k`` steps from now while ``k <= r_i``; the total is
a step function whose maximum sits at one of the ``r_j``. With the requests sorted
by ``r``, every breakpoint is one vectorised suffix sum: O(n log n) (O(n (log n +
B)) in pages of ``B`` tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vllm_proxima.kv.residency import KVShape

MAX_RESIDUE_TABLE = 1 << 22
"""Cells of :func:`projected_peak`'s residue table above which it bounds instead."""


def projected_peak(
    held: np.ndarray,
    remaining: np.ndarray,
    page_size: int = 1,
    groups: int = 1,
    fixed: np.ndarray | None = None,
) -> int:
    """Peak total pages of requests holding ``held`` tokens with ``remaining`` to go.

    Args:
        held: tokens each request holds (or will hold once its prompt is in), in
            each of ``groups`` full-attention groups.
        remaining: decode steps each request still needs (>= 0).
        page_size: tokens per page ``B``.
        groups: full-attention KV cache groups (each a page per ``B`` tokens).
        fixed: pages each request holds besides, constant while it lives (its
            sliding-window groups' bound); ``None``: none.

    Returns:
        ``max over k of sum_i [k <= r_i] (groups ceil((c_i + k) / B) + w_i)``,
        evaluated at the breakpoints ``k = r_j`` (and ``k = 0``): each term is
        nondecreasing in ``k`` while the request lives, so the maximum is where one
        is about to leave. With ``c_i + B - 1 = B q_i + m_i`` and ``k = B Q + R``,
        each full term is ``q_i + Q + [m_i >= B - R]``: suffix sums of ``q`` and
        suffix counts of ``m`` per residue, O(n (log n + B)).
    """
    n = held.size
    if n == 0:
        return 0
    if n * (page_size + 1) > MAX_RESIDUE_TABLE:
        return _bounded_peak(held, remaining, page_size, groups, fixed)
    # The last request placed among the others: one implementation of the sums.
    others = None if fixed is None else {"fixed": fixed[:-1]}
    placement = Placement.of(held[:-1], remaining[:-1], page_size, groups, others)
    if fixed is None:
        return placement.peak(int(held[-1]), int(remaining[-1]))
    return placement.peak(int(held[-1]), int(remaining[-1]), int(fixed[-1]), "fixed")


def _bounded_peak(
    held: np.ndarray,
    remaining: np.ndarray,
    page_size: int,
    groups: int,
    fixed: np.ndarray | None,
) -> int:
    """Huge pages (a residue table over ``MAX_RESIDUE_TABLE`` cells): every partial
    page bounded by a whole one, which is conservative."""
    order = np.argsort(remaining, kind="stable")
    r = remaining[order].astype(np.int64)
    q = -(-held[order].astype(np.int64) // page_size)
    alive = np.arange(r.size, 0, -1, dtype=np.int64)  # at k = r_j: every i from j on
    w = np.zeros_like(r) if fixed is None else fixed[order].astype(np.int64)
    big_q, big_r = np.divmod(r, page_size)
    demand = groups * (np.cumsum(q[::-1])[::-1] + (big_q + (big_r > 0)) * alive)
    demand += np.cumsum(w[::-1])[::-1]
    return int(max(int(demand.max()), groups * int(q.sum()) + int(w.sum())))


@dataclass(frozen=True, slots=True)
class Placement:
    """Requests sorted by remaining steps, with their suffix tables, for placing one
    more request at a time: admission sorts the residents when it reads them and
    places each candidate by bisection (~16 us at 200 residents, against ~41 us for
    sorting and tabling all of them again); admissions join it (:meth:`insert`) and
    departures leave it (:meth:`remove`) without a sort.

    ``projected_peak`` sorts stably, the last request last among equal steps, so a
    request placed here sits at ``p = searchsorted(r, r_c, "right")``; at combined
    position ``j`` the suffix holds the prepared requests ``i >= j`` and the placed
    one when ``j <= p``, ``i >= j - 1`` otherwise. Cutting every remaining step at
    ``cut`` (the windowed early part) keeps the order up to ties, and within a group
    of equal steps the first position's demand holds the whole group and is the
    largest (every term is >= 0), so the maximum is the cut arrays' own.

    A placement read ``d`` steps ago still speaks for its requests: one that held
    ``c`` tokens with ``r`` steps to go then holds ``c + d`` with ``r - d`` now, so
    ``k`` steps from now is ``d + k`` from then. :meth:`peak` with ``start=d``
    evaluates the breakpoints at or after ``d`` and everyone at ``d`` itself (the
    requests that outlived their projected ``r`` count at their size now); a request
    placed now is given in the placement's steps (``c - d`` tokens, ``r + d`` steps).

    :meth:`remove` takes a request out of the tables but leaves its step in ``r``:
    it subtracts from every row up to the last of its equal steps. The demand at any
    row is a real step's demand or, inside a group of equal steps, at most the first
    row's (which is exact), so the maximum stays exact.

    Attributes:
        held, remaining, fixed: the requests' arrays as given (for huge pages).
        r: remaining steps, sorted (stable); removed requests' steps stay.
        q_suffix: whole pages below each one's last partial page, suffix-summed
            (length ``n + 1``).
        alive: requests at or after each row, suffix-counted (removed ones out).
        at_least: ``at_least[i, t]``: requests ``>= i`` (sorted) whose last page
            holds ``>= t`` tokens of ``B`` (residue); ``None`` for huge pages.
        w_suffix: each named ``fixed`` array (pages held besides), sorted and
            suffix-summed.
    """

    held: np.ndarray
    remaining: np.ndarray
    fixed: dict[str, np.ndarray]
    page_size: int
    groups: int
    r: np.ndarray
    q_suffix: np.ndarray
    alive: np.ndarray
    at_least: np.ndarray | None
    w_suffix: dict[str, np.ndarray]

    @classmethod
    def of(
        cls,
        held: np.ndarray,
        remaining: np.ndarray,
        page_size: int = 1,
        groups: int = 1,
        fixed: dict[str, np.ndarray] | None = None,
    ) -> Placement:
        fixed = fixed or {}
        order = np.argsort(remaining, kind="stable")
        r = remaining[order].astype(np.int64)
        n = r.size
        q, m = np.divmod(held[order].astype(np.int64) + page_size - 1, page_size)
        q_suffix = np.zeros(n + 1, dtype=np.int64)
        q_suffix[:n] = np.cumsum(q[::-1])[::-1]
        alive = np.arange(n, -1, -1, dtype=np.int64)
        at_least = None
        if (n + 1) * (page_size + 1) <= MAX_RESIDUE_TABLE:
            counts = np.zeros((n + 1, page_size + 1), dtype=np.int32)
            counts[np.arange(n), m] = 1  # one residue per request
            counts = np.cumsum(counts[::-1], axis=0)[::-1]  # suffix over requests
            at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # suffix over residues
        w_suffix = {}
        for name, w in fixed.items():
            suffix = np.zeros(n + 1, dtype=np.int64)
            suffix[:n] = np.cumsum(w[order].astype(np.int64)[::-1])[::-1]
            w_suffix[name] = suffix
        return cls(
            held, remaining, dict(fixed), page_size, groups, r, q_suffix, alive, at_least, w_suffix
        )

    def _check_fixed(self, fixed: dict[str, int]) -> None:
        if fixed.keys() != self.fixed.keys():
            raise ValueError(f"fixed pages {sorted(fixed)} for arrays {sorted(self.fixed)}")

    def insert(self, held: int, remaining: int, fixed: dict[str, int] | None = None) -> Placement:
        """These requests and one more (``held`` tokens, ``remaining`` steps, ``fixed``
        pages per named array): :meth:`of` of the arrays with it appended, built from
        these tables in O(n B) copies instead of a sort and the suffix sums (an
        admission joins the residents, and the next candidate is placed among them)."""
        fixed = fixed or {}
        self._check_fixed(fixed)
        size = self.page_size
        held_all = np.append(self.held, held)
        remaining_all = np.append(self.remaining, remaining)
        fixed_all = {k: np.append(v, fixed[k]) for k, v in self.fixed.items()}
        if self.at_least is not None and (self.r.size + 2) * (size + 1) > MAX_RESIDUE_TABLE:
            # Grown past the table: bound from here on, as of() would (removed
            # requests are not in the arrays: see remove()).
            return Placement.of(held_all, remaining_all, size, self.groups, fixed_all)
        p = int(np.searchsorted(self.r, remaining, side="right"))  # as peak() places it
        q_suffix, alive, at_least, w_suffix = self._counted(p + 1, held, fixed, 1)

        def splice(added: np.ndarray, old: np.ndarray) -> np.ndarray:  # rows 0..p, then a copy
            return np.concatenate((added[: p + 1], old[p:]))

        return replace(
            self,
            held=held_all,
            remaining=remaining_all,
            fixed=fixed_all,
            r=np.concatenate((self.r[:p], np.array([remaining], dtype=np.int64), self.r[p:])),
            q_suffix=splice(q_suffix, self.q_suffix),
            alive=splice(alive, self.alive),
            at_least=None
            if at_least is None or self.at_least is None
            else splice(at_least, self.at_least),
            w_suffix={k: splice(v, self.w_suffix[k]) for k, v in w_suffix.items()},
        )

    def _counted(
        self, rows: int, held: int, fixed: dict[str, int], sign: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
        """The suffix tables with one request (``held`` tokens, ``fixed`` pages) added
        (``sign`` 1) to or taken from (-1) their rows ``0..rows-1`` (copies)."""
        size = self.page_size
        qc, mc = divmod(held + size - 1, size)

        def count(table: np.ndarray, x: int | np.ndarray) -> np.ndarray:
            out = table.copy()
            out[:rows] += sign * x
            return out

        at_least = None
        if self.at_least is not None:
            at_least = count(self.at_least, (mc >= np.arange(size + 1)).astype(self.at_least.dtype))
        w_suffix = {k: count(v, fixed[k]) for k, v in self.w_suffix.items()}
        return count(self.q_suffix, qc), count(self.alive, 1), at_least, w_suffix

    def remove(self, held: int, remaining: int, fixed: dict[str, int] | None = None) -> Placement:
        """These requests less one of them (given as it was placed: ``held`` tokens,
        ``remaining`` steps, ``fixed`` pages).

        Raises:
            ValueError: no request of these has ``remaining`` steps.
        """
        fixed = fixed or {}
        self._check_fixed(fixed)
        match = np.flatnonzero((self.remaining == remaining) & (self.held == held))
        for k, v in self.fixed.items():
            match = match[v[match] == fixed[k]]
        if not match.size:
            raise ValueError(f"no request of {held} tokens and {remaining} steps to remove")
        keep = np.ones(self.held.size, dtype=bool)
        keep[match[0]] = False
        held_all, remaining_all = self.held[keep], self.remaining[keep]
        fixed_all = {k: v[keep] for k, v in self.fixed.items()}
        if self.at_least is None:
            return Placement.of(held_all, remaining_all, self.page_size, self.groups, fixed_all)
        last = int(np.searchsorted(self.r, remaining, side="right"))  # rows 0..last-1
        q_suffix, alive, at_least, w_suffix = self._counted(last, held, fixed, -1)
        return replace(
            self,
            held=held_all,
            remaining=remaining_all,
            fixed=fixed_all,
            q_suffix=q_suffix,
            alive=alive,
            at_least=at_least,
            w_suffix=w_suffix,
        )

    def peak(
        self,
        held: int,
        remaining: int,
        w: int = 0,
        fixed: str | None = None,
        cut: int = -1,
        start: int = 0,
    ) -> int:
        """:func:`projected_peak` of these requests and one more holding ``held``
        tokens with ``remaining`` steps to go and ``w`` fixed pages (beside the
        prepared ``fixed`` array of that name), every remaining step cut at ``cut``
        when ``cut >= 0``, from step ``start`` of the placement on (see the class)."""
        size, groups, r = self.page_size, self.groups, self.r
        if self.at_least is None:
            rem = np.append(self.remaining, remaining) - start
            extra = None if fixed is None else np.append(self.fixed[fixed], w)
            if cut >= 0:
                rem = np.minimum(rem, cut - start)
            now = np.append(self.held, held) + start
            return _bounded_peak(now, np.maximum(rem, 0), size, groups, extra)
        n = r.size
        p = int(np.searchsorted(r, remaining, side="right"))
        k = np.concatenate((r[:p], np.array([remaining], dtype=np.int64), r[p:]))
        if cut >= 0:
            k = np.minimum(k, cut)
        # Rows before ``start`` need no cut: each of their terms is at most its term at
        # ``start``, and ``total`` (below) holds everyone at ``start``.
        j = np.arange(n + 1)
        with_c = j <= p
        i = np.where(with_c, j, j - 1)
        qc, mc = divmod(held + size - 1, size)
        big_q, big_r = np.divmod(k, size)  # k = B Q + R: each term q + Q + [m >= B - R]
        carry = self.at_least[i, size - big_r] + (with_c & (mc >= size - big_r))
        demand = groups * (
            self.q_suffix[i] + qc * with_c + big_q * (self.alive[i] + with_c) + carry
        )
        # k = start: everyone alive (at the placement's step 0: held pages only).
        s_q, s_r = divmod(start, size)
        total = groups * (
            int(self.q_suffix[0])
            + qc
            + s_q * (int(self.alive[0]) + 1)
            + int(self.at_least[0, size - s_r])
            + int(mc >= size - s_r)
        )
        if fixed is not None:
            demand = demand + self.w_suffix[fixed][i] + w * with_c
            total += int(self.w_suffix[fixed][0]) + w
        return int(max(int(demand.max()), total))


def windowed_peak(
    held: np.ndarray,
    remaining: np.ndarray,
    shape: KVShape,
    low: np.ndarray,
    high: np.ndarray,
    until: np.ndarray,
) -> int:
    """:func:`projected_peak` for a KV cache of full and sliding-window groups.

    Args:
        held, remaining: as for :func:`projected_peak` (``held``: tokens per full group).
        shape: the KV cache groups.
        low: sliding-window pages each request holds at most from step ``until``
            on (its decode allocations).
        high: sliding-window pages it holds at most before step ``until`` (its
            prefill chunks, held until the allocation after them); ``>= low``.
        until: that step (0: no such phase).

    NOTE: the bound. A request's pages are ``shape.full`` times its full-group pages
    plus its sliding-window pages. Each full group holds ``ceil((c + k) / B)`` pages
    ``k`` steps from now (the plain projection); each sliding group at most
    :meth:`~vllm_proxima.kv.residency.KVShape.window_pages` of the tokens it will
    reach and the tokens an allocation adds beyond those processed: a prefill chunk
    (``prefill_step``) until the allocation after its last chunk, a decode step
    (``decode_step``) from then on, and never more than ``ceil(tokens / B)``. So
    request ``i`` holds at most ``g_i(k) = full ceil((c_i + k) / B) + (high_i if k <
    t_i else low_i)`` pages while ``k <= r_i``, and the pages held at step ``k`` are
    at most ``S + sum_i [k <= r_i] g_i(k)`` (``S``: the distinct shared pages now,
    sliding ones included, so a shared window page is counted twice: safe). With
    ``T = max t_i`` over the requests with ``high_i > low_i``: for ``k >= T`` every
    term uses ``low``, and for ``k < T`` every term is at most its ``high`` one, so
    the peak is at most ``max(projected_peak(low), projected_peak(high) up to T -
    1)``; both are nondecreasing between departures, so each is exact at its
    breakpoints. ``low`` is constant over a request's remaining life (a window
    plateaus after ``W / B`` pages: that is what sliding windows buy), ``high`` for
    the one or two steps its prompt is in.
    """
    peak = projected_peak(held, remaining, shape.page_size, shape.full, low)
    late = high > low
    if late.any():
        until_all = int(until[late].max())
        if until_all > 0:
            early = np.minimum(remaining, until_all - 1)
            peak = max(peak, projected_peak(held, early, shape.page_size, shape.full, high))
    return peak
