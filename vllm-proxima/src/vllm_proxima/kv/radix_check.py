"""The radix prefix cache's full consistency check (``--proxima-debug-invariants``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from vllm_proxima.kv.radix_tree import _EMPTY, _MASK, NDArrayI32, _run_hash

if TYPE_CHECKING:
    from vllm_proxima.kv.radix import RadixCache


def check_invariants(cache: RadixCache) -> None:
    """Full O(cached + num_slots) consistency check; raises AssertionError."""

    def require(ok: bool | np.bool_, what: str) -> None:
        if not ok:
            raise AssertionError(f"RadixCache invariant violated: {what}")

    rc = cache.pool.refcount()
    runs: list[NDArrayI32] = []
    count = 0
    for ns, root in cache._roots.items():
        require(root.parent is None and root.size == 0, "root shape")
        require(root.namespace == ns and cache._nodes[root.id] is root, "root registry")
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
                require(cache._nodes[ch.id] is ch, "node registry")
                require(cache._par[ch.id] == nd.id, "parent array")
                require(cache._start[ch.id] == ch.depth and cache._len[ch.id] == n, "arrays")
                require(np.all(cache._nid[ch.slots] == ch.id), "slot -> node")
                require(
                    np.array_equal(cache._dep[ch.slots], np.arange(ch.depth, ch.depth + n)),
                    "slot -> position",
                )
                leaf = not ch.children
                require(leaf or not ch.evictable, "interior node marked evictable")
                require(not (ch in cache._parked and ch.evictable), "parked and evictable")
                require(not leaf or ch.evictable or ch in cache._parked, "lost leaf")
                require(leaf or ch not in cache._parked, "interior node parked")
                require(cache._parked.get(ch, ch.slots[-1]) == ch.slots[-1], "parked slot")
                if cache._keys:
                    h = (nd.h0 + _run_hash(nd.tokens, nd.depth)) & _MASK
                    require(ch.h0 == h, "path hash")
                runs.append(ch.slots)
                stack.append(ch)
    slots = np.concatenate(runs) if runs else _EMPTY
    require(slots.size == cache._num_cached, "cached count")
    require(np.unique(slots).size == slots.size, "slot cached twice")
    require(not np.count_nonzero(rc[slots] < 1), "cached slot not referenced")
    require(np.count_nonzero(cache._nid >= 0) == slots.size, "stale slot -> node")
    require(count == cache.policy.num_entries, "policy entry count")
    live = sum(nd is not None for nd in cache._nodes)
    require(live == count + len(cache._roots), "node registry size")
