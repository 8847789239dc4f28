"""Fleet configuration: topologies, sizes and which paths exist."""

from __future__ import annotations

from typing import Any

import pytest

from solver.errors import InvalidSimConfig
from solver.sim import FleetConfig


def test_paths_per_topology() -> None:
    assert FleetConfig().can_collocate and FleetConfig().can_disaggregate
    assert not FleetConfig(num_prefill=0).can_disaggregate
    pools = FleetConfig("pools", num_prefill=1, num_decode=2, num_mixed=3)
    assert pools.num_engines == 5 and pools.num_gpus == 6
    assert not FleetConfig("pools", num_prefill=1, num_decode=1).can_collocate
    assert "3 mixed" in pools.describe()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topology": "mesh"}, "unknown 'mesh'"),
        ({"num_prefill": -1}, "num_prefill"),
        ({"num_decode": 1.5}, "num_decode"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"max_num_batched_tokens": 128}, "below max_num_seqs 256"),
        ({"prefill_queue": "random"}, "prefill_queue: unknown 'random'"),
        ({"first_token": "proxy"}, "first_token: unknown 'proxy'"),
        ({"max_num_seqs": True}, "max_num_seqs"),
        ({"num_decode": 0}, "at least one decode GPU"),
        ({"num_mixed": 2}, "mixed GPUs belong to the pools topology"),
        ({"topology": "pools", "num_prefill": 1, "num_decode": 0}, "pools topology needs"),
        ({"prefix_cache_tokens": -1}, "prefix_cache_tokens: expected an integer >= 0"),
        ({"prefix_cache_tokens": "all"}, "prefix_cache_tokens"),
        ({"decode_choice": "random"}, "decode_choice: unknown 'random'"),
    ],
)
def test_invalid_fleets(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSimConfig, match=message):
        FleetConfig(**kwargs)


def test_prefix_cache_capacity_in_force() -> None:
    assert FleetConfig().prefix_cache_capacity(400_000) == 400_000  # the profile's by default
    assert FleetConfig().prefix_cache_capacity(None) is None
    assert FleetConfig(prefix_cache_tokens=1000).prefix_cache_capacity(400_000) == 1000
    assert FleetConfig(prefix_cache_tokens=None).prefix_cache_capacity(400_000) is None
