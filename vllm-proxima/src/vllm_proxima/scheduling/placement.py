"""One candidate at a time against the residents: :func:`projected_peak` without a sort.

Admission projects the residents plus one candidate, often several candidates a step
(a burst's queue). :func:`~vllm_proxima.scheduling.projection.projected_peak` sorts the
requests by remaining steps and builds a residue table each call (~33 us at 200
residents); here the residents are sorted and their suffix tables built once per step
(:class:`Placement`), and each candidate is placed into the order by bisection: the
same breakpoints, the same sums, in O(n) vector work.

Exactness. ``projected_peak`` sorts stably with the candidate last, so it sits after
the residents with the same remaining steps: position ``p = searchsorted(r, r_c,
"right")``. At combined position ``j`` the suffix holds residents ``i >= j`` and the
candidate when ``j <= p``, residents ``i >= j - 1`` otherwise; every term is the one
``projected_peak`` sums. The windowed early part cuts remaining steps at ``T - 1``;
the cut keeps the order up to ties, and within a group of equal steps the first
position's demand holds the whole group and is the largest (each term is >= 0), so
the maximum is the same as over the cut arrays' own stable sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vllm_proxima.scheduling.projection import MAX_RESIDUE_TABLE, projected_peak

if TYPE_CHECKING:
    from vllm_proxima.scheduling.windows import Windows


@dataclass(frozen=True, slots=True)
class Placement:
    """The residents' side of :func:`projected_peak`, prepared once.

    Attributes:
        held, remaining: the residents' arrays as given (for the fallback).
        fixed: named ``fixed`` arrays (a sliding-window shape's ``low`` and ``high``).
        r: remaining steps, sorted (stable).
        q_suffix, m: pages below the last partial page per request, suffix-summed
            (length ``n + 1``), and each request's residue, in sorted order.
        at_least: ``at_least[i, t]``: requests ``>= i`` (sorted) with residue ``>= t``;
            ``None`` where the table would be too big (the fallback then).
        w_suffix: each named ``fixed`` array, sorted and suffix-summed.
    """

    held: np.ndarray
    remaining: np.ndarray
    fixed: dict[str, np.ndarray]
    page_size: int
    groups: int
    r: np.ndarray
    q_suffix: np.ndarray
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
        at_least = None
        if (n + 1) * (page_size + 1) <= MAX_RESIDUE_TABLE:
            counts = np.zeros((n + 1, page_size + 1), dtype=np.int32)
            counts[np.arange(n), m] = 1
            counts = np.cumsum(counts[::-1], axis=0)[::-1]
            at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]
        w_suffix = {}
        for name, w in fixed.items():
            suffix = np.zeros(n + 1, dtype=np.int64)
            suffix[:n] = np.cumsum(w[order].astype(np.int64)[::-1])[::-1]
            w_suffix[name] = suffix
        return cls(
            held, remaining, dict(fixed), page_size, groups, r, q_suffix, at_least, w_suffix
        )

    def peak(
        self, held: int, remaining: int, w: int = 0, fixed: str | None = None, cut: int = -1
    ) -> int:
        """``projected_peak`` of the residents and a candidate holding ``held`` tokens
        with ``remaining`` steps to go and ``w`` fixed pages (the residents' ``fixed``
        array named ``fixed``), every remaining step cut at ``cut`` when ``cut >= 0``."""
        if self.at_least is None:
            return self._fallback(held, remaining, w, fixed, cut)
        size, groups, r = self.page_size, self.groups, self.r
        n = r.size
        p = int(np.searchsorted(r, remaining, side="right"))
        k = np.concatenate((r[:p], np.array([remaining], dtype=np.int64), r[p:]))
        if cut >= 0:
            k = np.minimum(k, cut)
        j = np.arange(n + 1)
        with_c = j <= p
        i = np.where(with_c, j, j - 1)
        qc, mc = divmod(held + size - 1, size)
        big_q, big_r = np.divmod(k, size)
        carry = self.at_least[i, size - big_r] + (with_c & (mc >= size - big_r))
        demand = groups * (self.q_suffix[i] + qc * with_c + big_q * (n + 1 - j) + carry)
        total = groups * (int(self.q_suffix[0]) + qc)
        if fixed is not None:
            demand = demand + self.w_suffix[fixed][i] + w * with_c
            total += int(self.w_suffix[fixed][0]) + w
        return int(max(int(demand.max()), total))

    def _fallback(
        self, held: int, remaining: int, w: int, fixed: str | None, cut: int
    ) -> int:
        rem = np.append(self.remaining, remaining)
        if cut >= 0:
            rem = np.minimum(rem, cut)
        extra = None if fixed is None else np.append(self.fixed[fixed], w)
        return projected_peak(
            np.append(self.held, held), rem, self.page_size, self.groups, extra
        )


def prepared(
    held: np.ndarray, remaining: np.ndarray, page_size: int, windows: Windows | None
) -> Placement:
    """The residents' :class:`Placement` for admission: one full group, or a
    sliding-window shape's full groups with its ``low`` and ``high`` window pages."""
    if windows is None:
        return Placement.of(held, remaining, page_size)
    fixed = {"low": windows.low, "high": windows.high}
    return Placement.of(held, remaining, page_size, windows.shape.full, fixed)


def placed_peak(
    placement: Placement, windows: Windows | None, held: int, remaining: int
) -> int:
    """The projected peak with a candidate (``held`` tokens, ``remaining`` steps) placed
    among the residents: ``projected_peak``, or with windows ``max(windowed_peaks)`` for
    the candidate ``windows`` placed last (:meth:`Windows.candidate`)."""
    if windows is None:
        return placement.peak(held, remaining)
    low, high, until = windows.placed()
    steady = placement.peak(held, remaining, low, "low")
    late = windows.high > windows.low
    last = int(windows.until[late].max()) if late.any() else 0
    if high > low:
        last = max(last, until)
    if last > 0:  # some request holds its prompt's window pages until step ``last``
        return max(steady, placement.peak(held, remaining, high, "high", cut=last - 1))
    return steady
