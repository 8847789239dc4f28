"""Block-hash chains: a block's hash follows its prefix; the ragged store and the workload's field."""

from __future__ import annotations

import numpy as np
import pytest

from solver.errors import InvalidTrace
from solver.sim import Workload
from solver.sim.block_hashes import BlockHashes, chain_hashes


def test_blocks_share_hashes_exactly_as_long_as_their_tokens_agree() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1000, 100)
    b = a.copy()
    b[40] += 1  # block 2 of 16-token blocks differs (tokens 32..47)
    ha, hb = chain_hashes(a, 16), chain_hashes(b, 16)
    assert len(ha) == 6  # 100 // 16 full blocks; the partial one has no hash
    assert np.array_equal(ha[:2], hb[:2])
    # The chain: every block after the first difference differs, equal tokens or not.
    assert np.all(ha[2:] != hb[2:])
    assert np.array_equal(chain_hashes(a, 16), ha)  # deterministic


def test_a_chain_continues_from_its_parent() -> None:
    tokens = np.arange(64, dtype=np.int64)
    whole = chain_hashes(tokens, 16)
    head = chain_hashes(tokens[:32], 16)
    tail = chain_hashes(tokens[32:], 16, parent=int(head[-1]))
    assert np.array_equal(whole, np.concatenate((head, tail)))
    # The same tokens at another place in a sequence hash differently (the parent differs).
    assert not np.array_equal(chain_hashes(tokens[32:], 16), tail)


def test_ragged_store_and_its_checks() -> None:
    chains = [np.array([1, 2, 3]), np.array([], dtype=np.int64), np.array([1, 9])]
    blocks = BlockHashes.from_chains(chains, block_size=4)
    assert blocks.offsets.tolist() == [0, 3, 3, 5]
    assert blocks.num_blocks.tolist() == [3, 0, 2]
    assert blocks.chain(2).tolist() == [1, 9]
    assert blocks.head(2).hashes.tolist() == [1, 2, 3]
    with pytest.raises(InvalidTrace, match="offsets"):
        BlockHashes(np.array([0, 2]), np.array([1, 2, 3]))
    with pytest.raises(InvalidTrace, match="block_size"):
        BlockHashes(np.array([0]), np.array([], dtype=np.int64), block_size=0)


def test_workload_checks_and_keeps_its_blocks() -> None:
    blocks = BlockHashes.from_chains([np.array([5, 6]), np.array([5])], block_size=16)
    wl = Workload(np.array([0.0, 1.0]), np.array([20, 17]), np.array([12, 1]), blocks=blocks)
    assert wl.at_rate(4.0).blocks is blocks
    head = wl.head(1).blocks
    assert head is not None and head.hashes.tolist() == [5, 6]
    with pytest.raises(InvalidTrace, match="chains for"):
        Workload(np.array([0.0]), np.array([20]), np.array([12]), blocks=blocks)
    too_long = BlockHashes.from_chains([np.array([5, 6, 7]), np.array([5])], block_size=16)
    with pytest.raises(InvalidTrace, match="longer than"):  # 32 tokens hold 2 full blocks, not 3
        Workload(np.array([0.0, 1.0]), np.array([20, 17]), np.array([12, 1]), blocks=too_long)
