"""The profile contract's optional long-context fields: their JSON form and their validation."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from solver.errors import InvalidProfile
from solver.profile_result import ProfileResult, profile_from_json_dict


def _profile() -> ProfileResult:
    return ProfileResult(
        T_prefill={64: 3.0, 128: 4.0},
        T_decode={(128, 1): 7.0, (128, 4): 7.5, (512, 1): 7.2},
        T_interference={(64, 4): 0.5, (128, 4): 0.9},
        p2p_bandwidth_GBps=100.0,
        bytes_per_token=1024,
    )


def test_a_profile_without_the_optional_fields_writes_neither_and_reads_back_equal() -> None:
    data = _profile().to_json_dict()
    assert "T_chunk_prefix" not in data
    assert "kv_capacity_tokens" not in data
    back = profile_from_json_dict(json.loads(json.dumps(data)))
    assert back.T_chunk_prefix == {}
    assert back.kv_capacity_tokens is None
    assert back.to_json_dict() == data


def test_the_chunk_prefix_table_and_the_kv_capacity_round_trip() -> None:
    profile = replace(
        _profile(), T_chunk_prefix={(2048, 512): 13.8, (512, 64): 3.1}, kv_capacity_tokens=400_000
    )
    data = json.loads(json.dumps(profile.to_json_dict()))
    assert data["T_chunk_prefix"] == [
        {"prefix_len": 512, "chunk": 64, "ms": 3.1},
        {"prefix_len": 2048, "chunk": 512, "ms": 13.8},
    ]
    back = profile_from_json_dict(data)
    assert back.T_chunk_prefix == {(2048, 512): 13.8, (512, 64): 3.1}
    assert back.kv_capacity_tokens == 400_000


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"kv_capacity_tokens": 0}, "kv_capacity_tokens: expected a positive integer"),
        ({"kv_capacity_tokens": 1.5}, "kv_capacity_tokens: expected a positive integer"),
        ({"T_chunk_prefix": [{"prefix_len": 0, "chunk": 64, "ms": 1.0}]}, "T_chunk_prefix[0].prefix_len"),
        ({"T_chunk_prefix": [{"prefix_len": 64, "chunk": 64}]}, "T_chunk_prefix[0].ms: missing"),
        ({"T_chunk_prefix": [{"prefix_len": 64, "chunk": 64, "ms": -1.0}]}, "T_chunk_prefix[0].ms"),
    ],
)
def test_bad_optional_fields_are_refused_naming_the_field(patch: dict[str, Any], message: str) -> None:
    data = {**_profile().to_json_dict(), **patch}
    with pytest.raises(InvalidProfile) as err:
        profile_from_json_dict(data)
    assert message in str(err.value)
