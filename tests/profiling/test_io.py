"""Profile files: ``.pt`` holds the plain JSON dict, readable with ``weights_only=True``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from profiling.errors import ProfilingError
from profiling.io import check_writable, save_profile
from solver.errors import InvalidProfile
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


UNPICKLED: list[str] = []


def _record_unpickling(tag: str) -> str:
    UNPICKLED.append(tag)
    return tag


class _RunsCodeWhenUnpickled:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_record_unpickling, ("ran",))


def test_a_pt_file_is_never_unpickled_into_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    data = PROFILE.to_json_dict()
    data["provenance"] = {"source": _RunsCodeWhenUnpickled()}
    torch.save(data, path)
    torch.load(path, weights_only=False)  # the control: a plain unpickling runs the code
    assert UNPICKLED == ["ran"]
    with pytest.raises(InvalidProfile, match=r"evil\.pt: refused: .* holds objects") as info:
        load_profile(path)
    assert UNPICKLED == ["ran"]
    message = str(info.value)
    assert "_record_unpickling" in message and "weights_only=False" not in message
    assert "\n" not in message and "\x1b" not in message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a torch file", r"not a readable torch profile \(UnpicklingError: Unsupported operand"),
        (b"", r"not a readable torch profile \(EOFError: no detail\)"),
        (None, "expected a JSON object, got Tensor"),
    ],
)
def test_bad_pt_files_are_refused_in_one_line(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "p.pt"
    if content is None:
        torch.save(torch.zeros(3), path)
    else:
        path.write_bytes(content)
    with pytest.raises(InvalidProfile, match=message) as info:
        load_profile(path)
    assert "\n" not in str(info.value)


def test_an_unwritable_place_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ProfilingError, match=r"a-file/p\.pt: cannot write there \(.+\)$"):
        check_writable(blocker / "p.pt")
    for name in ("p.pt", "p.json"):
        with pytest.raises(ProfilingError, match=r"cannot write the profile \(.+\)$"):
            save_profile(PROFILE, blocker / name)
    assert check_writable(tmp_path / "new" / "p.pt") == tmp_path / "new" / "p.pt"
    assert [p.name for p in (tmp_path / "new").iterdir()] == []  # the probe leaves nothing behind
