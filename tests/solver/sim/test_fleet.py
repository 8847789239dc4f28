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
    ],
)
def test_invalid_fleets(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSimConfig, match=message):
        FleetConfig(**kwargs)
