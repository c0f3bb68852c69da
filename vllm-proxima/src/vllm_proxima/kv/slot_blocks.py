"""A request's slots in the token layout, and the block list upstream sees of them."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

EMPTY_SLOTS = np.zeros(0, dtype=np.int32)


class SlotBlocks:
    """Duck-types upstream's ``KVCacheBlocks`` for one KV cache group.

    ``get_block_ids()`` returns the slot ids (one per token), which the model
    runner appends to the request's row of the block table.
    """

    __slots__ = ("slots",)

    def __init__(self, slots: NDArray[np.int32]) -> None:
        self.slots = slots

    @property
    def blocks(self) -> tuple[NDArray[np.int32], ...]:
        return (self.slots,)

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        if allow_none and self.slots.size == 0:
            return None
        return (self.slots.tolist(),)

    def get_unhashed_block_ids(self) -> list[int]:
        return self.slots.tolist()

    def get_unhashed_block_ids_all_groups(self) -> list[list[int]]:
        return [self.slots.tolist()]

    def new_empty(self) -> SlotBlocks:
        return SlotBlocks(EMPTY_SLOTS)

    def __add__(self, other: SlotBlocks) -> SlotBlocks:
        return SlotBlocks(np.concatenate((self.slots, other.slots)))

    def __len__(self) -> int:
        return int(self.slots.size)


class RequestSlots:
    """A request's slot ids in token order, in a buffer grown by doubling."""

    __slots__ = ("buf", "cached", "n")

    def __init__(self) -> None:
        self.buf = np.empty(64, dtype=np.int32)
        self.n = 0
        self.cached = 0  # leading tokens already offered to the prefix cache

    def append(self, slots: NDArray[np.int32]) -> None:
        end = self.n + slots.size
        if end > self.buf.size:
            grown = np.empty(max(end, 2 * self.buf.size), dtype=np.int32)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : end] = slots
        self.n = end

    @property
    def slots(self) -> NDArray[np.int32]:
        return self.buf[: self.n]

    @property
    def last(self) -> int:
        return int(self.buf[self.n - 1]) if self.n else -1
