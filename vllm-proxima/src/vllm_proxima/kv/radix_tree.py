"""The radix trees of the token-granular prefix cache: node storage and edits.

One tree per namespace; each node owns a run of tokens and the equally long run of
their slots. Per-slot arrays (node id, token position) and per node-id arrays
(parent, start, length) mirror the trees so that evictability is one vectorised
pass (:meth:`RadixTree._num_pinned`). What the cache does with the trees (match,
insert, evict) is :mod:`vllm_proxima.kv.radix`; see it for the design.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from vllm_proxima.kv.evict import Entry, EvictionPolicy
from vllm_proxima.kv.slot_pool import SlotPool

NDArrayI32 = npt.NDArray[np.int32]
_EMPTY = np.zeros(0, dtype=np.int32)
_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible mod 2**64
_MASK = (1 << 64) - 1
_pow = np.ones(1, dtype=np.uint64)  # _BASE ** i mod 2**64, grown on demand


def _run_hash(tokens: NDArrayI32, start: int) -> int:
    """``sum((t_i + 1) * B ** (start + i))`` mod 2**64: a run's part of a path hash.

    The hash of a path ``p`` is ``_run_hash(p, 0)``; it is additive over runs, so a
    node stores the hash of the path before it (``h0``) and extends it per run.
    """
    global _pow
    n = tokens.size
    if _pow.size < start + n:
        size = max(start + n, 2 * _pow.size, 4096)
        powers = np.full(size, _BASE, dtype=np.uint64)
        powers[0] = 1
        _pow = np.cumprod(powers, dtype=np.uint64)  # wraps mod 2**64
    if n <= 1:
        return (tokens.item(0) + 1) * _pow.item(start) & _MASK if n else 0
    terms = (tokens.astype(np.uint64) + np.uint64(1)) * _pow[start : start + n]
    return int(terms.sum(dtype=np.uint64))


def _common(run: NDArrayI32, query: NDArrayI32) -> int:
    """Length of the common prefix of two token runs."""
    m = min(run.size, query.size)
    a, b = run[:m], query[:m]
    if a.tobytes() == b.tobytes():  # the usual case, and a memcmp
        return m
    return int((a != b).argmax())


@dataclass(slots=True, eq=False, kw_only=True)
class _Node(Entry):
    """A run of cached tokens and their slots; a root has an empty run.

    ``tokens``/``slots`` are views of ``tbuf``/``sbuf`` from ``off``: a leaf grows in
    place into spare capacity (see :meth:`RadixCache._extend`).
    """

    id: int
    namespace: Hashable
    parent: _Node | None
    depth: int  # sequence position of tokens[0]
    h0: int = 0  # hash of the path before this node (ARC ghost keys only)
    tbuf: NDArrayI32
    sbuf: NDArrayI32
    off: int = 0
    tokens: NDArrayI32
    slots: NDArrayI32
    children: dict[int, _Node] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.tokens.size


class RadixTree:
    """The trees' storage and structural edits; :class:`~vllm_proxima.kv.radix.RadixCache`
    adds lookups, inserts, eviction and counters on top.

    Args:
        pool: The slot pool the cached slots come from.
        policy: The eviction policy the edits keep informed.
    """

    def __init__(self, pool: SlotPool, policy: EvictionPolicy) -> None:
        self.pool = pool
        self.policy = policy
        self._keys = policy.uses_ghosts
        self._roots: dict[Hashable, _Node] = {}
        self._nodes: list[_Node | None] = []  # by node id
        self._free_ids: list[int] = []
        self._parked: dict[_Node, int] = {}  # leaves seen ending in a shared slot -> it
        # Per slot: id of the node caching it (-1: not cached), token position.
        self._nid = np.full(pool.num_slots, -1, dtype=np.int32)
        self._dep = np.zeros(pool.num_slots, dtype=np.int32)
        # Per node id: parent id (-1: root or unused), start position, length.
        self._par = np.full(64, -1, dtype=np.int32)
        self._start = np.zeros(64, dtype=np.int64)
        self._len = np.zeros(64, dtype=np.int64)
        self._num_cached = 0
        self.evicted = self.evicted_nodes = 0

    # ------------------------------------------------------------------ tree edits
    def _new_node(
        self,
        parent: _Node | None,
        tokens: NDArrayI32,
        slots: NDArrayI32,
        depth: int,
        namespace: Hashable,
        h0: int = 0,
    ) -> _Node:
        # Takes ownership of tokens/slots (callers pass copies).
        if self._free_ids:
            nid = self._free_ids.pop()
        else:
            nid = len(self._nodes)
            self._nodes.append(None)
            if nid >= self._par.size:
                grow = self._par.size
                self._par = np.concatenate((self._par, np.full(grow, -1, np.int32)))
                self._start = np.concatenate((self._start, np.zeros(grow, np.int64)))
                self._len = np.concatenate((self._len, np.zeros(grow, np.int64)))
        node = _Node(
            id=nid, namespace=namespace, parent=parent, depth=depth, h0=h0,
            tbuf=tokens, sbuf=slots, tokens=tokens, slots=slots,
        )  # fmt: skip
        self._nodes[nid] = node
        self._par[nid] = parent.id if parent is not None else -1
        self._start[nid] = depth
        self._len[nid] = tokens.size
        self._nid[slots] = nid
        self._dep[slots] = np.arange(depth, depth + slots.size, dtype=np.int32)
        return node

    def _free_id(self, node: _Node) -> None:
        self._nodes[node.id] = None
        self._par[node.id] = -1
        self._len[node.id] = 0
        self._free_ids.append(node.id)

    def _drop_root(self, root: _Node) -> None:
        del self._roots[root.namespace]
        self._free_id(root)

    def _add_child(self, parent: _Node, tokens: NDArrayI32, slots: NDArrayI32, depth: int) -> None:
        key, h0 = None, 0
        if self._keys:
            h0 = (parent.h0 + _run_hash(parent.tokens, parent.depth)) & _MASK
            key = (parent.namespace, (h0 + _run_hash(tokens[:1], depth)) & _MASK)
        if parent.parent is not None and not parent.children:  # leaf -> interior
            self.policy.set_evictable(parent, False)
            self._parked.pop(parent, None)
        node = self._new_node(parent, tokens, slots, depth, parent.namespace, h0)
        parent.children[tokens.item(0)] = node
        self.policy.add(node, key=key, evictable=True)

    def _split(self, node: _Node, k: int) -> _Node:
        """Cuts ``node``'s run at ``k``: a new head takes ``[:k]``; returns it.

        ``node`` keeps ``[k:]``, its children, and its place in the policy.
        """
        parent = node.parent
        assert parent is not None and 0 < k < node.tokens.size
        head = self._new_node(
            parent, node.tokens[:k].copy(), node.slots[:k].copy(), node.depth,
            node.namespace, node.h0,
        )  # fmt: skip
        parent.children[head.tokens.item(0)] = head
        if self._keys:
            node.h0 = (node.h0 + _run_hash(head.tokens, node.depth)) & _MASK
        node.tokens, node.slots = node.tokens[k:], node.slots[k:]
        node.off += k
        node.depth += k
        node.parent = head
        head.children[node.tokens.item(0)] = node
        self._par[node.id] = head.id
        self._start[node.id] = node.depth
        self._len[node.id] -= k
        self.policy.split(node, head)
        return head

    def _extend(self, node: _Node, tokens: NDArrayI32, slots: NDArrayI32) -> None:
        """Appends to a leaf's run in place (capacity doubles: amortised O(1) per token)."""
        n, k = node.tokens.size, tokens.size
        end = node.off + n
        if end + k > node.tbuf.size:
            cap = 2 * (n + k)
            tbuf, sbuf = np.empty(cap, np.int32), np.empty(cap, np.int32)
            tbuf[:n], sbuf[:n] = node.tokens, node.slots
            node.tbuf, node.sbuf, node.off, end = tbuf, sbuf, 0, n
        node.tbuf[end : end + k] = tokens
        node.sbuf[end : end + k] = slots
        node.tokens = node.tbuf[node.off : end + k]
        node.slots = node.sbuf[node.off : end + k]
        self._len[node.id] += k
        self._nid[slots] = node.id
        self._dep[slots] = np.arange(node.depth + n, node.depth + n + k, dtype=np.int32)
        self.policy.grow(node, k)
        if self._parked.pop(node, None) is not None:  # new last slot: a candidate again
            self.policy.set_evictable(node, True)

    def _cut(self, node: _Node, k: int) -> NDArrayI32:
        """Uncaches the last ``k`` tokens of leaf ``node``; returns their slots.

        The caller clears ``_nid`` for them and frees them. A node left empty is
        removed, and its parent, if now childless, becomes an evictable leaf (or,
        for a root, goes).
        """
        size = node.tokens.size
        gone = node.slots[size - k :]  # NOTE: a view, consumed before the run can regrow
        self._num_cached -= k
        self.evicted += k
        key = None
        if self._keys:  # identity of the first evicted token's path
            h = node.h0 + _run_hash(node.tokens[: size - k], node.depth)
            h += _run_hash(node.tokens[size - k : size - k + 1], node.depth + size - k)
            key = (node.namespace, h & _MASK)
        if k < size:
            node.tokens, node.slots = node.tokens[: size - k], node.slots[: size - k]
            self._len[node.id] -= k
            self.policy.shrink(node, k, key=key)
            return gone
        self.policy.remove(node, key=key)
        parent = node.parent
        assert parent is not None
        del parent.children[node.tokens.item(0)]
        node.parent = None
        self._free_id(node)
        self.evicted_nodes += 1
        if not parent.children:
            if parent.parent is None:
                self._drop_root(parent)
            else:
                self.policy.set_evictable(parent, True)
        return gone

    # ------------------------------------------------------------------ evictability
    def _park(self, node: _Node) -> None:
        # NOTE: A parked leaf keeps its last slot: growing unparks it (_extend) and
        # a split leaves the tail (the same node) last.
        self.policy.set_evictable(node, False)
        self._parked[node] = node.slots.item(-1)

    def _unpark(self, rc: npt.NDArray[np.int32]) -> None:
        # Parked leaves whose last slot is back at refcount 1 are candidates again.
        parked = self._parked
        if not parked:
            return
        last = np.fromiter(parked.values(), dtype=np.int64, count=len(parked))
        back = np.flatnonzero(rc[last] == 1)
        if back.size:
            nodes = list(parked)
            for j in back.tolist():
                del parked[nodes[j]]
                self.policy.set_evictable(nodes[j], True)

    def _shared(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """Node ids and positions of the cached slots at refcount > 1."""
        hot = np.flatnonzero(self.pool.refcount() > 1)
        ids = self._nid[hot]
        cached = ids >= 0
        return ids[cached], self._dep[hot[cached]]

    def _num_pinned(self, ids: npt.NDArray[np.int32], deps: npt.NDArray[np.int32]) -> int:
        """Cached tokens at or above a shared slot (on its path from the root)."""
        if not ids.size:
            return 0
        size = self._par.size
        last = np.full(size, -1, dtype=np.int64)  # deepest shared position per node
        # Max per node by one sort of (node, position) keys: np.maximum.at is ~2x slower.
        key = (ids.astype(np.int64) << 32) | deps.astype(np.int64)
        key.sort()
        node = key >> 32
        ends = np.flatnonzero(np.append(node[1:] != node[:-1], True))
        last[node[ends]] = key[ends] & 0xFFFFFFFF
        above = np.zeros(size, dtype=np.bool_)  # has a shared slot in a child subtree
        front = self._par[np.flatnonzero(last >= 0)]
        while front.size:
            front = front[front >= 0]
            front = np.unique(front[~above[front]])
            above[front] = True
            front = self._par[front]
        own = (last >= 0) & ~above
        return int(self._len[above].sum() + (last[own] - self._start[own] + 1).sum())
