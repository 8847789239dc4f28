"""JSON Lines traces with hash ids: parsing, full blocks only, errors naming the line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from solver.errors import InvalidTrace
from solver.sim import AlwaysCollocated, FleetConfig, simulate
from solver.sim.hashed_trace import read_hashed_trace
from solver.sim.latency import StepLatency


def write(tmp_path: Path, rows: Sequence[object]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_rows_sorted_and_partial_blocks_dropped(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {"timestamp": 3000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
            {"timestamp": 1000, "input_length": 513, "output_length": 2, "hash_ids": [1, 9]},
            {"timestamp": 2000, "input_length": 40, "output_length": 7},
        ],
    )
    wl = read_hashed_trace(path)
    assert wl.arrival_s.tolist() == [0.0, 1.0, 2.0]
    assert wl.prompt_len.tolist() == [513, 40, 1100]
    assert wl.blocks is not None and wl.blocks.block_size == 512
    # 513 tokens hold one full 512-token block; 1,100 hold two.
    assert [wl.blocks.chain(i).tolist() for i in range(3)] == [[1], [], [1, 2]]
    assert read_hashed_trace(path, block_size=256).blocks is not None


def test_a_shared_block_is_reused(tmp_path: Path, latency: StepLatency) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"timestamp": 5000, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 4]},
    ]
    wl = read_hashed_trace(write(tmp_path, rows))
    fleet = FleetConfig(num_prefill=0, num_decode=1, prefix_cache_tokens=10_000)
    rec = simulate(latency, wl, AlwaysCollocated(), fleet)
    assert rec.prefix_hit_tokens is not None and rec.prefix_hit_tokens.tolist() == [0, 1024]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("not json", "line 2"),
        ({"timestamp": "soon", "input_length": 5, "output_length": 1}, "timestamp"),
        ({"timestamp": 1, "input_length": 0, "output_length": 1}, "input_length"),
        ({"timestamp": 1, "input_length": 5}, "output_length"),
        ({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}, "hash_ids"),
        ([1, 2], "JSON object"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, row: object, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1})
    path.write_text(good + "\n" + (row if isinstance(row, str) else json.dumps(row)) + "\n")
    with pytest.raises(InvalidTrace, match=message) as info:
        read_hashed_trace(path)
    assert "line 2" in str(info.value)


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(InvalidTrace, match="no requests"):
        read_hashed_trace(path)
