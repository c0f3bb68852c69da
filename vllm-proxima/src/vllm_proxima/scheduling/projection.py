"""The projected peak: the most pages resident requests will hold at once.

Request ``i`` holding ``c_i`` tokens with ``r_i`` decode steps to go holds
``ceil((c_i + k) / B)`` pages ``k`` steps from now while ``k <= r_i``; the total is
a step function whose maximum sits at one of the ``r_j``. With the requests sorted
by ``r``, every breakpoint is one vectorised suffix sum: O(n log n) (O(n (log n +
B)) in pages of ``B`` tokens).
"""

from __future__ import annotations

import numpy as np

MAX_RESIDUE_TABLE = 1 << 22
"""Cells of :func:`projected_peak`'s residue table above which it bounds instead."""


def projected_peak(held: np.ndarray, remaining: np.ndarray, page_size: int = 1) -> int:
    """Peak total pages of requests holding ``held`` tokens with ``remaining`` to go.

    Args:
        held: tokens each request holds (or will hold once its prompt is in).
        remaining: decode steps each request still needs (>= 0).
        page_size: tokens per page ``B``.

    Returns:
        ``max over k of sum_i [k <= r_i] ceil((c_i + k) / B)``, evaluated at the
        breakpoints ``k = r_j`` (and ``k = 0``). With ``c_i + B - 1 = B q_i + m_i``
        and ``k = B Q + R``, each term is ``q_i + Q + [m_i >= B - R]``: suffix sums
        of ``q`` and suffix counts of ``m`` per residue, O(n (log n + B)).
    """
    if held.size == 0:
        return 0
    order = np.argsort(remaining, kind="stable")
    r = remaining[order].astype(np.int64)
    c = held[order].astype(np.int64)
    n = r.size
    alive = np.arange(n, 0, -1, dtype=np.int64)  # at k = r_j: every i from j on
    if page_size == 1:
        demand = np.cumsum(c[::-1])[::-1] + r * alive
        return int(max(int(demand.max()), int(c.sum())))
    q, m = np.divmod(c + page_size - 1, page_size)
    big_q, big_r = np.divmod(r, page_size)
    if n * (page_size + 1) > MAX_RESIDUE_TABLE:
        # Huge pages: bound each partial page by a whole one (conservative).
        demand = np.cumsum(q[::-1])[::-1] + (big_q + (big_r > 0)) * alive
        return int(max(int(demand.max()), int(q.sum())))
    # at_least[j, t]: requests i >= j with m_i >= t (t = 0..B; t = B: none).
    rows = np.arange(n)
    counts = np.zeros((n, page_size + 1), dtype=np.int32)
    counts[rows, m] = 1  # one residue per request
    counts = np.cumsum(counts[::-1], axis=0)[::-1]  # suffix over requests
    at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # suffix over residues
    carry = at_least[rows, page_size - big_r]  # column B (R = 0) is all zeros
    demand = np.cumsum(q[::-1])[::-1] + big_q * alive + carry
    return int(max(int(demand.max()), int(q.sum())))
