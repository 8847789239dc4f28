"""Block allocation, slot arithmetic and the cache's write/gather."""

from __future__ import annotations

import pytest
import torch

from profiling.errors import ProfilingError
from profiling.kv_cache import BlockAllocator, PagedKVCache, blocks_needed, slots_for
from profiling.models import PRESETS


def test_slots_follow_the_block_table() -> None:
    assert blocks_needed(0, 4) == 0 and blocks_needed(4, 4) == 1 and blocks_needed(5, 4) == 2
    # positions 2..5 of a sequence in blocks [7, 3]: 7*4+2, 7*4+3, 3*4+0, 3*4+1
    assert slots_for([7, 3], 2, 4, 4) == [30, 31, 12, 13]
    with pytest.raises(ProfilingError, match="cannot hold"):
        slots_for([7], 2, 4, 4)


def test_allocator_hands_out_and_takes_back_blocks() -> None:
    alloc = BlockAllocator(num_blocks=5, block_size=4)
    a = alloc.allocate(9)  # 3 blocks
    assert len(a) == 3 and alloc.num_free == 2 and not alloc.can_allocate(9)
    b = alloc.allocate(8)
    assert set(a).isdisjoint(b) and alloc.num_free == 0
    with pytest.raises(ProfilingError, match="KV cache full"):
        alloc.allocate(1)
    alloc.free(a)
    assert alloc.num_free == 3 and alloc.can_allocate(12)


def test_write_then_gather_returns_tokens_in_sequence_order() -> None:
    cfg = PRESETS["tiny"]
    cache = PagedKVCache(cfg, num_blocks=6, block_size=4, device=torch.device("cpu"), dtype=torch.float32)
    table = [5, 1, 3]
    k = torch.randn(10, cfg.num_kv_heads, cfg.head_dim)
    v = torch.randn(10, cfg.num_kv_heads, cfg.head_dim)
    cache.write(1, torch.tensor(slots_for(table, 0, 10, 4)), k, v)
    gk, gv = cache.gather(1, torch.tensor([table], dtype=torch.int32), 10)
    assert gk.shape == (1, 10, cfg.num_kv_heads, cfg.head_dim)
    torch.testing.assert_close(gk[0], k)
    torch.testing.assert_close(gv[0], v)
    assert cache.layer(0)[0].abs().sum() == 0  # other layers untouched
    assert cache.nbytes == cfg.num_layers * 2 * 6 * 4 * cfg.num_kv_heads * cfg.head_dim * 4
