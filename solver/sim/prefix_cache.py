"""One GPU's prefix cache: KV blocks by hash, least-recently-used out first, at a capacity.

Blocks are named by their chain hash (``solver.sim.block_hashes``), so the cached prefix of a
request is its longest run of leading blocks present here (vLLM's ``find_longest_cache_hit``):
``lookup`` walks the chain until the first miss. A hit, like an insertion, makes the blocks the
most recently used; they are touched from the last block to the first, so the chain's first
block (the one every extension of the prefix needs) is the newest and its tail goes first,
as vLLM frees a request's blocks in reverse order for the same reason.

The capacity is a plain number of blocks given by the fleet (0: nothing is ever kept). Blocks
held by running requests are not pinned: the cache stands for the KV left over from finished
work, which is what a later request can reuse, and a capacity below the running requests'
own KV is the caller's choice to make.

``OrderedDict`` gives every operation in O(1) per block: membership, move to the newest end,
and pop from the oldest end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Cached block hashes of one GPU, oldest first (lengths in blocks)."""

    __slots__ = ("_blocks", "capacity_blocks", "num_evicted")

    def __init__(self, capacity_blocks: int) -> None:
        if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int) or capacity_blocks < 0:
            raise ValueError(f"capacity_blocks: expected an integer >= 0, got {capacity_blocks!r}")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.num_evicted = 0  # blocks dropped to make room so far

    @property
    def num_blocks(self) -> int:
        """Blocks held now."""
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def match(self, chain: Sequence[int], max_blocks: int) -> int:
        """Leading blocks of ``chain`` (at most ``max_blocks``) held here, touching nothing (a
        router scoring GPUs)."""
        blocks = self._blocks
        hit = 0
        limit = min(len(chain), max_blocks)
        while hit < limit and chain[hit] in blocks:
            hit += 1
        return hit

    def lookup(self, chain: Sequence[int], max_blocks: int) -> int:
        """``match``, and the blocks found become the newest (a request using them)."""
        hit = self.match(chain, max_blocks)
        blocks = self._blocks
        for k in range(hit - 1, -1, -1):
            blocks.move_to_end(chain[k])
        return hit

    def insert(self, chain: Sequence[int]) -> None:
        """Hold the blocks of ``chain`` (computed here or received), evicting the oldest beyond
        the capacity; a chain longer than the capacity keeps its first ``capacity`` blocks."""
        capacity = self.capacity_blocks
        if capacity == 0:
            return
        blocks = self._blocks
        keep = chain[:capacity] if len(chain) > capacity else chain
        for k in range(len(keep) - 1, -1, -1):
            h = keep[k]
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        excess = len(blocks) - capacity
        if excess > 0:
            self.num_evicted += excess
            for _ in range(excess):
                blocks.popitem(last=False)
