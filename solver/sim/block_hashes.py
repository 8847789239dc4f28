"""Prompt content identity: each request's chain of KV block hashes, stored ragged.

A request's tokens (its prompt, then its output) are cut into blocks of ``block_size`` tokens,
as vLLM's paged KV cache cuts them (16 by default). Only full blocks are hashed, and a block's
hash covers its parent block's hash and its own tokens (vLLM's prefix-caching chain), so two
requests share block ``k`` exactly when they share their first ``(k + 1) * block_size`` tokens:
the longest cached prefix is the longest run of leading blocks found in a cache.

``BlockHashes`` holds every request's chain in one int64 array with per-request offsets
(``hashes[offsets[i]:offsets[i + 1]]`` is request ``i``'s chain), the compact form a trace of
hundreds of thousands of requests needs. A chain may stop short of the request's full blocks
(a trace that knows only the prompts' content); a request with an empty chain shares nothing.
The first ``prompt_len // block_size`` hashes of a chain are the prompt's blocks, the rest the
output's (which a following turn of a conversation finds in a cache).

The hash is BLAKE2b (8 bytes, as a signed int64) of the parent's hash and the block's token ids:
deterministic across runs and machines, unlike Python's ``hash``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidTrace

IntArray = npt.NDArray[np.int64]
DEFAULT_BLOCK_SIZE = 16  # tokens per KV block (vLLM's default)
ROOT_HASH = 0  # the parent of a sequence's first block


def chain_hashes(tokens: IntArray, block_size: int = DEFAULT_BLOCK_SIZE, parent: int = ROOT_HASH) -> IntArray:
    """The hash of each full block of ``tokens`` (token ids), each over its parent's hash and
    its own ids; a trailing partial block has none. ``parent`` continues an earlier chain."""
    if block_size < 1:
        raise InvalidTrace(f"block_size: expected an integer >= 1, got {block_size}")
    ids = np.ascontiguousarray(tokens, dtype=np.int64)
    num_blocks = len(ids) // block_size
    out = np.empty(num_blocks, dtype=np.int64)
    for k in range(num_blocks):
        h = hashlib.blake2b(parent.to_bytes(8, "little", signed=True), digest_size=8)
        h.update(ids[k * block_size : (k + 1) * block_size].tobytes())
        parent = int.from_bytes(h.digest(), "little", signed=True)
        out[k] = parent
    return out


@dataclass(frozen=True, eq=False)
class BlockHashes:
    """Every request's block-hash chain: ``hashes[offsets[i]:offsets[i + 1]]`` for request ``i``."""

    offsets: IntArray  # n + 1 non-decreasing offsets into hashes, from 0 to len(hashes)
    hashes: IntArray  # the chains, one after another
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per block

    def __post_init__(self) -> None:
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise InvalidTrace(f"block_size: expected an integer >= 1, got {self.block_size!r}")
        off = self.offsets
        if len(off) < 1 or off[0] != 0 or off[-1] != len(self.hashes) or np.any(np.diff(off) < 0):
            raise InvalidTrace("block hashes: offsets must rise from 0 to the number of hashes")

    @classmethod
    def from_chains(cls, chains: Sequence[IntArray], block_size: int = DEFAULT_BLOCK_SIZE) -> BlockHashes:
        """One chain per request, packed."""
        sizes = np.array([len(c) for c in chains], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        hashes = np.concatenate(chains).astype(np.int64) if len(chains) else np.empty(0, np.int64)
        return cls(offsets, hashes, block_size)

    @property
    def num_requests(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_blocks(self) -> IntArray:
        """Blocks in each request's chain."""
        return np.diff(self.offsets)

    def chain(self, rid: int) -> IntArray:
        """Request ``rid``'s chain."""
        return self.hashes[self.offsets[rid] : self.offsets[rid + 1]]

    def head(self, num_requests: int) -> BlockHashes:
        """The chains of the first ``num_requests`` requests."""
        off = self.offsets[: num_requests + 1]
        return BlockHashes(off, self.hashes[: off[-1]], self.block_size)
