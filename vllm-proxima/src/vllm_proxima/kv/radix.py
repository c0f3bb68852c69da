"""Token-granular prefix cache: a radix tree over KV slots, one tree per namespace.

A request's KV is a sequence of slots, one per token. The cache records that token
path ``tokens[:i + 1]`` has its KV in slot ``s_i`` so that a later request sharing
any prefix (any length, not a multiple of a block) reuses those slots. Each node
owns a run of tokens and the equally long run of their slots (numpy arrays);
children are keyed by the first token of their run, and matching compares whole
runs at once (a ``memcmp`` of the bytes, then ``argmax(a != b)`` for the first
mismatch). Diverging inside a run splits the node into a head and a tail, cutting
its token run and slot run at the same index. A leaf that no match has hit yet
grows in place (the chunks, or decode steps, of one request make one node,
amortised O(1) per token); otherwise new tokens become a child. Namespaces (LoRA
id, cache salt, ...) have separate trees: requests share KV only within one
namespace.

References: the cache holds one pool reference per cached slot (taken by
:meth:`RadixCache.insert`, dropped by :meth:`RadixCache.evict` and
:meth:`RadixCache.reset`); :meth:`RadixCache.match` takes none, the caller increfs
what it uses. A cached slot at refcount 1 is held by the cache alone.

Eviction is leaf-first and by token: the victim (chosen by the policy among leaves
believed evictable, see :mod:`vllm_proxima.kv.evict`) loses the slots at the end of
its run that are at refcount 1, only as many as still needed, so
``evict(n)`` frees exactly ``n`` slots when it can. A leaf that ends in a shared
slot is "parked" (not evictable) until that slot's refcount drops back to 1, which
each :meth:`RadixCache.evict` re-checks for all parked leaves at once. A node whose
last child goes becomes a leaf, so whole idle subtrees are freed bottom-up.

Per-slot arrays (the node id and the token position of each cached slot) and per
node-id arrays (parent, start, length) make :meth:`RadixCache.num_evictable_slots`
exact with one vectorised pass over the pool's refcounts: a cached slot can be
evicted iff neither it nor any cached slot below it in its tree is shared.

ARC ghosts are keyed by ``(namespace, hash of the token path through the first
evicted token)``; nodes keep the 64-bit polynomial hash of the path before them.

NOTE: Every cached slot is at one tree position: callers must not insert a slot
that is already cached at another position (it would hold two cache references
and never be evictable). ``check_invariants`` verifies this.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from vllm_proxima.kv.evict import make_policy
from vllm_proxima.kv.radix_check import check_invariants
from vllm_proxima.kv.radix_tree import _EMPTY, NDArrayI32, RadixTree, _common, _Node
from vllm_proxima.kv.slot_pool import SlotPool


@dataclass(slots=True)
class RadixStats:
    """Counters of one :class:`RadixCache` (token counts unless said otherwise)."""

    policy: str
    queries: int  # tokens looked up by match()
    hits: int  # of those, tokens found cached
    inserted: int  # tokens newly cached by insert()
    evicted: int  # tokens (= slots) freed by evict()
    evicted_nodes: int  # whole nodes removed by evict()
    cached: int  # tokens cached now
    shared: int  # cached slots also referenced by someone else (refcount > 1)
    nodes: int  # non-root nodes
    namespaces: int
    policy_stats: dict[str, float]

    @property
    def hit_rate(self) -> float:
        """``hits / queries`` (0 when nothing was queried)."""
        return self.hits / self.queries if self.queries else 0.0


class RadixCache(RadixTree):
    """Prefix cache of token -> slot paths over a :class:`SlotPool`.

    Args:
        pool: The slot pool the cached slots come from.
        policy: Eviction policy: ``"lru"``, ``"lfu"`` or ``"arc"``.
        capacity: Tokens the cache could at most hold (ARC's ``c``); defaults to
            the pool's usable slots.
        debug: Run :meth:`check_invariants` after every mutation.
    """

    def __init__(
        self,
        pool: SlotPool,
        policy: str = "lru",
        *,
        capacity: int | None = None,
        debug: bool = False,
    ) -> None:
        super().__init__(
            pool,
            make_policy(policy, capacity if capacity is not None else max(1, pool.num_usable)),
        )
        self.debug = debug
        self.queries = self.hits = self.inserted = 0

    # ------------------------------------------------------------------ queries
    @property
    def num_cached_slots(self) -> int:
        """Slots (= tokens) the cache holds a reference on."""
        return self._num_cached

    @property
    def num_nodes(self) -> int:
        """Non-root nodes in all trees."""
        return self.policy.num_entries

    @property
    def num_evictable_slots(self) -> int:
        """Slots :meth:`evict` can free now: exact, O(num_slots) vectorised.

        A cached slot is evictable iff it is at refcount 1 and so is every cached
        slot below it in its tree (its subtree goes first, leaf-first).
        """
        if not self._num_cached:
            return 0
        ids, deps = self._shared()
        return self._num_cached - self._num_pinned(ids, deps)

    def holders(self, slots: npt.NDArray[np.int32] | None = None) -> npt.NDArray[np.int32]:
        """How many requests hold each of ``slots`` (default: every slot of the pool):
        the refcount less the cache's own."""
        if slots is None:
            return self.pool.refcount() - (self._nid >= 0)
        return self.pool.refcount(slots) - (self._nid[slots] >= 0)

    def match(
        self,
        tokens: npt.ArrayLike,
        namespace: Hashable = None,
        *,
        touch: bool = True,
        count: bool | None = None,
    ) -> tuple[NDArrayI32, int]:
        """Finds the longest cached prefix of ``tokens``; takes no references.

        Args:
            tokens: Token ids of the sequence (1-D).
            namespace: Tree to look in; only equal namespaces share.
            touch: Tell the policy (recency and frequency of the matched nodes).
                ``False`` (with ``count`` unset) for a side-effect-free peek.
            count: Count the lookup in the hit/query stats (default: as ``touch``).
                A caller that peeked first counts with ``record_lookup`` instead.

        Returns:
            ``(slots, n)``: the slots of ``tokens[:n]`` (a new array) and ``n``.
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        n, i = tokens.size, 0
        parts: list[NDArrayI32] = []
        node = self._roots.get(namespace)
        while node is not None and i < n:
            child = node.children.get(tokens.item(i))
            if child is None:
                break
            k = _common(child.tokens, tokens[i:])
            parts.append(child.slots[:k])
            if touch:
                self.policy.touch(child, hit=True)
            i += k
            node = child if k == child.tokens.size else None
        if touch if count is None else count:
            self.queries += n
            self.hits += i
        if not parts:
            return _EMPTY.copy(), 0
        return (np.concatenate(parts) if len(parts) > 1 else parts[0].copy()), i

    def record_lookup(self, queried: int, hit: int) -> None:
        """Count one lookup made by peeking: ``queried`` tokens, of which ``hit`` cached."""
        if not 0 <= hit <= queried:
            raise ValueError(f"hit {hit} outside [0, {queried}]")
        self.queries += queried
        self.hits += hit

    # ------------------------------------------------------------------ insert
    def insert(
        self, tokens: npt.ArrayLike, slots: npt.ArrayLike, namespace: Hashable = None
    ) -> int:
        """Records that ``tokens[i]`` (with its prefix) has its KV in ``slots[i]``.

        Positions already cached keep their cached slot (the caller's is not
        taken); the rest are cached with the caller's slots, on which the cache
        takes one reference each (``pool.incref``).

        Args:
            tokens: Token ids of the sequence from its start (1-D).
            slots: Slot of each token; same length, in use, not cached elsewhere.
            namespace: Tree to insert into.

        Returns:
            Number of newly cached tokens.

        Raises:
            ValueError: Shapes differ, or a new slot is free or reserved (then
                nothing is cached).
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        slots = np.asarray(slots, dtype=np.int32)
        if tokens.ndim != 1 or tokens.shape != slots.shape:
            raise ValueError(f"tokens {tokens.shape} and slots {slots.shape} must match, 1-D")
        n = tokens.size
        if n == 0:
            return 0
        node = self._roots.get(namespace)
        if node is None:
            node = self._roots[namespace] = self._new_node(None, _EMPTY, _EMPTY, 0, namespace)
        i = 0
        while i < n:
            child = node.children.get(tokens.item(i))
            if child is None:
                break
            k = _common(child.tokens, tokens[i:])
            self.policy.touch(child, hit=False)
            if k < child.tokens.size:
                if i + k == n:  # ends inside the run: all cached
                    return 0
                child = self._split(child, k)
            i += k
            node = child
        if i == n:
            return 0
        new_t, new_s = tokens[i:], slots[i:]
        try:
            self.pool.incref(new_s)
        except (ValueError, IndexError):
            if node.parent is None and not node.children:
                self._drop_root(node)
            raise
        if node.parent is not None and not node.children and node.hits == 0:
            self._extend(node, new_t, new_s)  # e.g. the next chunk of the same prompt
        else:
            self._add_child(node, new_t.copy(), new_s.copy(), i)
        self._num_cached += n - i
        self.inserted += n - i
        if self.debug:
            self.check_invariants()
        return n - i

    # ------------------------------------------------------------------ evict
    def evict(self, num_slots: int) -> int:
        """Frees up to ``num_slots`` slots only the cache references, leaf-first.

        Victims come in policy order; each loses the refcount-1 tail of its run,
        only as much as still needed, so exactly ``min(num_slots,
        num_evictable_slots)`` slots are freed. Shared slots are never freed.

        Returns:
            Slots freed (returned to the pool).
        """
        if num_slots <= 0 or not self._num_cached:
            return 0
        rc = self.pool.refcount()  # live read-only view
        self._unpark(rc)
        freed, gone = 0, []
        while freed < num_slots:
            victim = self.policy.victim()
            if victim is None:
                break
            node = cast("_Node", victim)  # the policy orders this tree's nodes only
            shared = rc[node.slots] != 1
            avail = int(shared[::-1].argmax()) if np.count_nonzero(shared) else shared.size
            keep = shared.size - avail
            if avail == 0:
                self._park(node)
                continue
            k = min(avail, num_slots - freed)
            gone.append(self._cut(node, k))
            freed += k
            if keep and k == avail:
                self._park(node)
        if gone:
            slots = np.concatenate(gone)
            self._nid[slots] = -1
            self.pool.free(slots)
        if self.debug:
            self.check_invariants()
        return freed

    def reset(self) -> int:
        """Drops every cached token (one decref per slot) and all policy state.

        Returns:
            Slots released.
        """
        runs = [nd.slots for nd in self._nodes if nd is not None and nd.parent is not None]
        released = 0
        if runs:
            slots = np.concatenate(runs)
            self._nid[slots] = -1
            self.pool.free(slots)
            released = slots.size
        for nd in self._nodes:  # break parent <-> child cycles: freed without the GC
            if nd is not None:
                nd.parent, nd.children = None, {}
        self._roots.clear()
        self._nodes.clear()
        self._free_ids.clear()
        self._parked.clear()
        self._par.fill(-1)
        self._start.fill(0)
        self._len.fill(0)
        self._num_cached = 0
        self.policy.clear()
        return released

    def stats(self) -> RadixStats:
        """Counters since construction, plus the current sizes (O(num_slots))."""
        return RadixStats(
            policy=self.policy.name,
            queries=self.queries,
            hits=self.hits,
            inserted=self.inserted,
            evicted=self.evicted,
            evicted_nodes=self.evicted_nodes,
            cached=self._num_cached,
            shared=int(self._shared()[0].size) if self._num_cached else 0,
            nodes=self.policy.num_entries,
            namespaces=len(self._roots),
            policy_stats=self.policy.stats(),
        )

    def check_invariants(self) -> None:
        """Full O(cached + num_slots) consistency check; raises AssertionError."""
        check_invariants(self)
