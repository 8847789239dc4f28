"""Profile files: ``.pt`` holds the plain JSON dict, readable with ``weights_only=True``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from profiling.errors import ProfilingError
from profiling.io import save_profile
from solver.profile_io import load_profile
from solver.profile_result import ProfileResult

PROFILE = ProfileResult(
    T_prefill={64: 3.5, 128: 6.0},
    T_decode={(128, 1): 7.0, (128, 4): 7.5},
    T_interference={(64, 4): 0.5, (64, 8): -0.01},
    T_mixed={(64, 4): 8.0, (64, 8): 8.2},
    T_baseline={(64, 4): 7.5, (64, 8): 8.21},
    p2p_bandwidth_GBps=12.5,
    bytes_per_token=147456,
    model_config={"name": "qwen3-8b", "num_layers": 36},
    device={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
    transfer_path="pinned-relay",
    versions={"torch": "2.13.0"},
    grids={"prompt_lens": [64, 128]},
    samples={"prefill/64": [3.4, 3.5, 3.6]},
    provenance={"source": "torch-profiler", "failed_points": []},
)


@pytest.mark.parametrize("name", ["profile_data.pt", "sub/dir/profile.json"])
def test_round_trip_through_the_loader(tmp_path: Path, name: str) -> None:
    path = save_profile(PROFILE, tmp_path / name)
    assert path == tmp_path / name and not list(path.parent.glob(".*.tmp"))
    assert load_profile(path) == PROFILE


def test_pt_file_is_a_plain_dict(tmp_path: Path) -> None:
    path = save_profile(PROFILE, tmp_path / "p.pt")
    data = torch.load(path, weights_only=True)
    assert data == json.loads(json.dumps(PROFILE.to_json_dict()))


@pytest.mark.parametrize("name", ["p.txt", "p"])
def test_other_suffixes_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ProfilingError, match=r"\.pt or \.json"):
        save_profile(PROFILE, tmp_path / name)
