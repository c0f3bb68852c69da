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
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from vllm_proxima.kv.evict import Entry, EvictionPolicy, make_policy
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


class RadixCache:
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
        self.pool = pool
        self.policy: EvictionPolicy = make_policy(
            policy, capacity if capacity is not None else max(1, pool.num_usable)
        )
        self.debug = debug
        self._keys = self.policy.uses_ghosts
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
        self.queries = self.hits = self.inserted = self.evicted = self.evicted_nodes = 0

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
            node = self.policy.victim()
            if node is None:
                break
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

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Full O(cached + num_slots) consistency check; raises AssertionError."""

        def require(ok: bool | np.bool_, what: str) -> None:
            if not ok:
                raise AssertionError(f"RadixCache invariant violated: {what}")

        rc = self.pool.refcount()
        runs: list[NDArrayI32] = []
        count = 0
        for ns, root in self._roots.items():
            require(root.parent is None and root.size == 0, "root shape")
            require(root.namespace == ns and self._nodes[root.id] is root, "root registry")
            require(bool(root.children), f"empty root {ns!r} kept")
            stack = [root]
            while stack:
                nd = stack.pop()
                for first, ch in nd.children.items():
                    count += 1
                    n = ch.tokens.size
                    require(n > 0 and ch.slots.size == n, "empty or misaligned run")
                    require(int(ch.tokens[0]) == first, "child key != first token")
                    require(ch.parent is nd and ch.namespace == ns, "parent link")
                    require(ch.depth == nd.depth + nd.size, "depth")
                    require(self._nodes[ch.id] is ch, "node registry")
                    require(self._par[ch.id] == nd.id, "parent array")
                    require(self._start[ch.id] == ch.depth and self._len[ch.id] == n, "arrays")
                    require(np.all(self._nid[ch.slots] == ch.id), "slot -> node")
                    require(
                        np.array_equal(self._dep[ch.slots], np.arange(ch.depth, ch.depth + n)),
                        "slot -> position",
                    )
                    leaf = not ch.children
                    require(leaf or not ch.evictable, "interior node marked evictable")
                    require(not (ch in self._parked and ch.evictable), "parked and evictable")
                    require(not leaf or ch.evictable or ch in self._parked, "lost leaf")
                    require(leaf or ch not in self._parked, "interior node parked")
                    require(self._parked.get(ch, ch.slots[-1]) == ch.slots[-1], "parked slot")
                    if self._keys:
                        h = (nd.h0 + _run_hash(nd.tokens, nd.depth)) & _MASK
                        require(ch.h0 == h, "path hash")
                    runs.append(ch.slots)
                    stack.append(ch)
        slots = np.concatenate(runs) if runs else _EMPTY
        require(slots.size == self._num_cached, "cached count")
        require(np.unique(slots).size == slots.size, "slot cached twice")
        require(not np.count_nonzero(rc[slots] < 1), "cached slot not referenced")
        require(np.count_nonzero(self._nid >= 0) == slots.size, "stale slot -> node")
        require(count == self.policy.num_entries, "policy entry count")
        live = sum(nd is not None for nd in self._nodes)
        require(live == count + len(self._roots), "node registry size")
