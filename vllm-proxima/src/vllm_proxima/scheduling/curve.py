"""The residents' demand at each of their breakpoints, kept while admission places
candidates among them.

:meth:`Placement.peak <vllm_proxima.scheduling.projection.Placement.peak>` builds
the demand of every row with the candidate in it: a dozen array operations over all
rows for each candidate. Most of that is the residents' own demand, the same for
every candidate of a step (one placement, one horizon cut, one start). A
:class:`Curve` holds it: ``demand[i]``, the pages rows ``i`` and after hold at row
``i``'s step. A candidate placed at row ``p`` adds its pages to the rows before
``p``, sits at row ``p`` itself, and leaves the rows after it as they are, so its
peak is three terms:

- ``max(demand[i] + its pages at k_i)`` over ``i < p`` (one pass over ``p`` rows);
- row ``p``: the residents from ``p`` on at its own last step, and it;
- ``max(demand[i])`` over ``i >= p``: a suffix maximum, kept.

An admission (:meth:`Curve.insert`) and a departure (:meth:`Curve.remove`) change
the rows the same way the placement's tables change, in one pass, so a step pays one
build (its start and cut) and a pass per candidate. The result is
:meth:`Placement.peak`'s, exactly (a property test holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vllm_proxima.scheduling.projection import Placement


def _tail(demand: np.ndarray) -> np.ndarray:
    """``tail[i] = max(demand[i:])``, with ``tail[n] = -1`` (no rows)."""
    tail = np.full(demand.size + 1, -1, dtype=np.int64)
    if demand.size:
        tail[:-1] = np.maximum.accumulate(demand[::-1])[::-1]
    return tail


@dataclass(frozen=True, slots=True)
class Curve:
    """One placement's demand per row for one ``fixed`` array, ``cut`` and ``start``
    (:meth:`Placement.peak`'s arguments of those names).

    Attributes:
        placement: the placement the rows are of.
        fixed: the name of the fixed pages array counted (``None``: none).
        cut: every remaining step cut at it (``-1``: none).
        start: the first step counted (see :class:`Placement`).
        k: each row's step, cut.
        demand: pages held at row ``i``'s step by the requests of rows ``i`` and after.
        tail: suffix maxima of ``demand`` (one longer: ``-1`` past the last row).
        total: pages every request holds at ``start``.
    """

    placement: Placement
    fixed: str | None
    cut: int
    start: int
    k: np.ndarray
    demand: np.ndarray
    tail: np.ndarray
    total: int

    @classmethod
    def of(
        cls, placement: Placement, fixed: str | None = None, cut: int = -1, start: int = 0
    ) -> Curve | None:
        """The curve of ``placement`` (``None`` for huge pages: no residue table)."""
        table = placement.at_least
        if table is None:
            return None
        size, groups, n = placement.page_size, placement.groups, placement.r.size
        k = placement.r if cut < 0 else np.minimum(placement.r, cut)
        big_q, big_r = np.divmod(k, size)
        q, alive = placement.q_suffix, placement.alive
        demand = groups * (q[:n] + big_q * alive[:n] + table[np.arange(n), size - big_r])
        s_q, s_r = divmod(start, size)
        total = groups * (int(q[0]) + s_q * int(alive[0]) + int(table[0, size - s_r]))
        if fixed is not None:
            demand = demand + placement.w_suffix[fixed][:n]
            total += int(placement.w_suffix[fixed][0])
        return cls(placement, fixed, cut, start, k, demand, _tail(demand), total)

    def _pages(self, held: int, k: int | np.ndarray) -> int | np.ndarray:
        """Pages a request holding ``held`` tokens holds ``k`` steps on, all groups."""
        size = self.placement.page_size
        return self.placement.groups * ((held + size - 1 + k) // size)

    def _with(self, held: int, remaining: int, w: int) -> tuple[int, int, np.ndarray]:
        """A candidate's row ``p``, that row's demand with it, and the rows before it
        with it."""
        pl = self.placement
        size = pl.page_size
        p = int(np.searchsorted(pl.r, remaining, side="right"))
        kc = remaining if self.cut < 0 else min(remaining, self.cut)
        big_q, big_r = divmod(kc, size)
        row = pl.groups * (
            int(pl.q_suffix[p]) + big_q * int(pl.alive[p]) + int(pl.at_least[p, size - big_r])  # type: ignore[index]
        )
        if self.fixed is not None:
            row += int(pl.w_suffix[self.fixed][p])
        row += int(self._pages(held, kc)) + w
        before = self.demand[:p] + (self._pages(held, self.k[:p]) + w)
        return p, row, before

    def peak(self, held: int, remaining: int, w: int = 0) -> int:
        """``placement.peak(held, remaining, w, fixed, cut, start)``."""
        p, row, before = self._with(held, remaining, w)
        best = max(row, int(self.tail[p]), self.total + int(self._pages(held, self.start)) + w)
        return max(best, int(before.max())) if p else best

    def insert(self, placement: Placement, held: int, remaining: int, w: int = 0) -> Curve:
        """The curve of ``placement``, this one's with one request inserted (``held``
        tokens, ``remaining`` steps, ``w`` pages of this curve's ``fixed`` array)."""
        p, row, before = self._with(held, remaining, w)
        kc = remaining if self.cut < 0 else min(remaining, self.cut)
        k = np.concatenate((self.k[:p], np.array([kc], dtype=np.int64), self.k[p:]))
        demand = np.concatenate((before, np.array([row], dtype=np.int64), self.demand[p:]))
        total = self.total + int(self._pages(held, self.start)) + w
        return Curve(placement, self.fixed, self.cut, self.start, k, demand, _tail(demand), total)

    def remove(self, placement: Placement, held: int, remaining: int, w: int = 0) -> Curve:
        """The curve of ``placement``, this one's with one request removed (as it was
        placed): the rows up to the last of its equal steps lose its pages, as the
        placement's tables do (:meth:`Placement.remove`)."""
        last = int(np.searchsorted(self.placement.r, remaining, side="right"))
        demand = self.demand.copy()
        demand[:last] -= self._pages(held, self.k[:last]) + w
        total = self.total - int(self._pages(held, self.start)) - w
        return Curve(
            placement, self.fixed, self.cut, self.start, self.k, demand, _tail(demand), total
        )
