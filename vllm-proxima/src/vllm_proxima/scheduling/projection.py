"""The projected peak: the most pages resident requests will hold at once.

Request ``i`` holding ``c_i`` tokens with ``r_i`` decode steps to go holds
``ceil((c_i + k) / B)`` pages ``k`` steps from now while ``k <= r_i``; the total is
a step function whose maximum sits at one of the ``r_j``. With the requests sorted
by ``r``, every breakpoint is one vectorised suffix sum: O(n log n) (O(n (log n +
B)) in pages of ``B`` tokens).
"""

from __future__ import annotations

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
    if held.size == 0:
        return 0
    order = np.argsort(remaining, kind="stable")
    r = remaining[order].astype(np.int64)
    c = held[order].astype(np.int64)
    n = r.size
    if fixed is None:
        extra: np.ndarray | int = 0
        extra_all = 0
    else:
        w = fixed[order].astype(np.int64)
        extra = np.cumsum(w[::-1])[::-1]
        extra_all = int(w.sum())
    alive = np.arange(n, 0, -1, dtype=np.int64)  # at k = r_j: every i from j on
    if page_size == 1:
        demand = groups * (np.cumsum(c[::-1])[::-1] + r * alive) + extra
        return int(max(int(demand.max()), groups * int(c.sum()) + extra_all))
    q, m = np.divmod(c + page_size - 1, page_size)
    big_q, big_r = np.divmod(r, page_size)
    if n * (page_size + 1) > MAX_RESIDUE_TABLE:
        # Huge pages: bound each partial page by a whole one (conservative).
        demand = groups * (np.cumsum(q[::-1])[::-1] + (big_q + (big_r > 0)) * alive) + extra
        return int(max(int(demand.max()), groups * int(q.sum()) + extra_all))
    # at_least[j, t]: requests i >= j with m_i >= t (t = 0..B; t = B: none).
    rows = np.arange(n)
    counts = np.zeros((n, page_size + 1), dtype=np.int32)
    counts[rows, m] = 1  # one residue per request
    counts = np.cumsum(counts[::-1], axis=0)[::-1]  # suffix over requests
    at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # suffix over residues
    carry = at_least[rows, page_size - big_r]  # column B (R = 0) is all zeros
    demand = groups * (np.cumsum(q[::-1])[::-1] + big_q * alive + carry) + extra
    return int(max(int(demand.max()), groups * int(q.sum()) + extra_all))


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
