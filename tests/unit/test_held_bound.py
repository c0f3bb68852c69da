"""``held_bound`` and ``HeldBound`` over a fake view (no vLLM needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_proxima.scheduling.held_bound import HEADROOM_PART, HeldBound, held_bound


@dataclass
class _Req:
    request_id: str


@dataclass
class _View:
    pages: dict[str, int]
    held: int
    shares_held_pages: bool = True
    calls: list[int] = field(default_factory=list)

    def pages_of(self, request_ids: list[str]) -> list[int]:
        self.calls.append(len(request_ids))
        return [self.pages.get(i, 0) for i in request_ids]

    def held_pages(self) -> int:
        return self.held


def test_a_prefix_held_in_common_counts_once() -> None:
    # Three residents share a 10-page prompt: 12 pages each in their lists, 16 at most.
    # Held: 10 shared + 2 own each = 16. Bound: 16 + 3 * 4 = 28; the sum of most: 48.
    view = _View({"a": 12, "b": 12, "c": 12}, held=16)
    bound = held_bound(view, {"a": 16, "b": 16, "c": 16}, [_Req("a"), _Req("b"), _Req("c")])
    assert bound == 28


def test_a_resident_past_its_most_adds_nothing() -> None:
    view = _View({"a": 5, "b": 3}, held=8)
    # "a" holds one page beyond its most (an allocation ahead of a finish): adds 0.
    assert held_bound(view, {"a": 4, "b": 6}, [_Req("a"), _Req("b")]) == 8 + 3


def test_where_it_does_not_apply() -> None:
    view = _View({"a": 1}, held=1, shares_held_pages=False)
    assert held_bound(view, {"a": 2}, [_Req("a")]) is None
    view = _View({"a": 1, "b": 1}, held=2)
    assert held_bound(view, {"a": 2, "x": 2}, [_Req("a"), _Req("b")]) is None  # b unknown
    assert held_bound(view, {"a": 2}, [_Req("a"), _Req("b")]) is None  # more running than known


def test_fits_with_the_headroom_to_spare_exactly() -> None:
    view = _View({"a": 12, "b": 12, "c": 12}, held=16)
    most = {"a": 16, "b": 16, "c": 16}
    running = [_Req("a"), _Req("b"), _Req("c")]
    # Bound 28; capacity 40 less its eighth (5) leaves 35 for the bound and the candidate.
    assert 40 // HEADROOM_PART == 5
    assert HeldBound(view).fits(most, running, new_pages=7, capacity=40)
    assert not HeldBound(view).fits(most, running, new_pages=8, capacity=40)


def test_no_pass_when_the_held_pages_alone_are_over() -> None:
    view = _View({"a": 30}, held=36)  # limit: 40 - 5 - 1 = 34 < 36
    bound = HeldBound(view)
    assert not bound.fits({"a": 30}, [_Req("a")], new_pages=1, capacity=40)
    assert bound.passes == 0 and view.calls == []
