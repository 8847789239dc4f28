"""The paged KV cache: fixed-size blocks, a free-list allocator and slot arithmetic.

Layout follows vLLM's paged attention: each layer holds ``k`` and ``v`` tensors of shape
``[num_blocks, block_size, num_kv_heads, head_dim]``. A sequence owns a *block table* (the
list of block ids holding its tokens in order); token ``p`` of the sequence lives in block
``block_table[p // block_size]`` at offset ``p % block_size``, i.e. at flat *slot*
``block_table[p // block_size] * block_size + p % block_size``. Writes go through a slot
mapping (one slot per new token); reads gather whole blocks by block table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch

from profiling.errors import ProfilingError
from profiling.models import ModelConfig


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks holding ``num_tokens`` tokens (ceil division)."""
    return -(-num_tokens // block_size)


def slots_for(block_table: Sequence[int], start: int, num_tokens: int, block_size: int) -> list[int]:
    """Flat cache slots of positions ``start .. start + num_tokens - 1`` of one sequence."""
    if blocks_needed(start + num_tokens, block_size) > len(block_table):
        raise ProfilingError(
            f"block table of {len(block_table)} blocks cannot hold {start + num_tokens} tokens"
        )
    return [
        block_table[p // block_size] * block_size + p % block_size for p in range(start, start + num_tokens)
    ]


class BlockAllocator:
    """A free list of KV blocks (pure Python: the scheduler side of the cache)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_allocate(self, num_tokens: int) -> bool:
        return blocks_needed(num_tokens, self.block_size) <= len(self._free)

    def allocate(self, num_tokens: int) -> list[int]:
        """A block table for ``num_tokens`` tokens; raise ``ProfilingError`` when the cache is full."""
        need = blocks_needed(num_tokens, self.block_size)
        if need > len(self._free):
            raise ProfilingError(
                f"KV cache full: {num_tokens} tokens need {need} blocks, {self.num_free} free"
            )
        return [self._free.popleft() for _ in range(need)]

    def free(self, block_table: Sequence[int]) -> None:
        self._free.extend(block_table)


class PagedKVCache:
    """Per-layer K and V block pools on one device."""

    def __init__(
        self, config: ModelConfig, num_blocks: int, block_size: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ProfilingError(f"KV cache needs positive sizes, got {num_blocks} blocks of {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (config.num_layers, 2, num_blocks, block_size, config.num_kv_heads, config.head_dim)
        # Zeros rather than empty: stale memory could hold NaN/inf, which never changes latency
        # but would make padded reads in tests meaningless.
        self._pool = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self._pool.numel() * self._pool.element_size()

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(k, v)`` of one layer, each ``[num_blocks, block_size, num_kv_heads, head_dim]``."""
        return self._pool[index, 0], self._pool[index, 1]

    def write(self, index: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' ``k``/``v`` (``[num_tokens, kv_heads, head_dim]``) at flat ``slots``."""
        k_cache, v_cache = self.layer(index)
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)

    def gather(
        self, index: int, block_tables: torch.Tensor, num_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``num_tokens`` keys/values of each block table (``[num_seqs, max_blocks]``).

        Returns ``k, v`` of shape ``[num_seqs, num_tokens, kv_heads, head_dim]`` (a copy: this is
        the gather that a paged-attention kernel avoids by reading blocks in place).
        """
        k_cache, v_cache = self.layer(index)
        num_seqs = block_tables.shape[0]
        k = k_cache[block_tables].view(num_seqs, -1, *k_cache.shape[2:])[:, :num_tokens]
        v = v_cache[block_tables].view(num_seqs, -1, *v_cache.shape[2:])[:, :num_tokens]
        return k, v
