"""One GPU's prefix cache: longest cached prefix, LRU eviction at a capacity in blocks."""

from __future__ import annotations

import pytest

from solver.sim.prefix_cache import PrefixCache


def test_full_and_partial_hits_stop_at_the_first_missing_block() -> None:
    cache = PrefixCache(10)
    cache.insert([1, 2, 3, 4])
    assert cache.lookup([1, 2, 3, 4], 10) == 4
    assert cache.lookup([1, 2, 3, 4, 5, 6], 10) == 4  # a longer request: its cached prefix
    assert cache.lookup([1, 2, 9, 4], 10) == 2  # block 4 is held but follows a miss
    assert cache.lookup([7, 1, 2], 10) == 0
    assert cache.lookup([1, 2, 3, 4], 3) == 3  # capped (a request computes its last token)


def test_eviction_drops_the_least_recently_used_and_a_chain_tail_first() -> None:
    cache = PrefixCache(4)
    cache.insert([1, 2, 3])
    cache.insert([10, 11])  # 5 blocks for 4: the oldest goes, the tail of the first chain
    assert 3 not in cache and all(h in cache for h in (1, 2, 10, 11))
    assert cache.num_evicted == 1
    assert cache.lookup([1, 2, 3], 10) == 2  # the chain's head survived
    # The lookup made 1, 2 the newest: the next insertion evicts 11, then 10.
    cache.insert([20])
    assert 11 not in cache and 10 in cache
    cache.insert([21])
    assert 10 not in cache and cache.lookup([1, 2], 10) == 2
    assert cache.num_blocks == 4


def test_match_reads_without_touching() -> None:
    cache = PrefixCache(2)
    cache.insert([1])
    cache.insert([2])
    assert cache.match([1], 5) == 1  # 1 stays the oldest
    cache.insert([3])
    assert 1 not in cache and 2 in cache and 3 in cache


def test_a_chain_longer_than_the_capacity_keeps_its_head() -> None:
    cache = PrefixCache(3)
    cache.insert([1, 2, 3, 4, 5])
    assert cache.lookup([1, 2, 3, 4, 5], 10) == 3 and cache.num_blocks == 3


def test_capacity_zero_holds_nothing() -> None:
    cache = PrefixCache(0)
    cache.insert([1, 2, 3])
    assert cache.num_blocks == 0 and cache.lookup([1, 2, 3], 10) == 0
    with pytest.raises(ValueError, match="capacity_blocks"):
        PrefixCache(-1)
