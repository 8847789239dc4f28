"""The params file: the one loader and writer (the format itself: tests/pdroute_core/test_params.py).

``load_params`` is what the service, every CLI command, the publish job and the simulator
read a params file with: the hardening cases (FIFO, device, directory, size, depth, huge
numbers, unreadable) are tested here once; tests/app/test_reload.py checks the service keeps
serving through each of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pdroute_core.params import CostModelParams, ParamsMetadata, parse_params
from pdroute_core.routing.design import AnalyticalCostModel
from solver.errors import InvalidParams
from solver.params import MAX_PARAMS_FILE_BYTES, load_params, load_params_and_bytes, save_params
from tests.factories import TEST_PARAMS, write_params


def test_bad_params_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidParams, match="file not found"):
        load_params(tmp_path / "absent.json")
    with pytest.raises(InvalidParams, match="is a directory"):
        load_params(tmp_path)
    bad = tmp_path / "bad.json"
    write_params(bad, alpha=-1)
    with pytest.raises(InvalidParams, match=f"{bad}: alpha: must be > 0"):
        AnalyticalCostModel(load_params(bad))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InvalidParams, match="not valid JSON"):
        load_params(binary)


def test_save_load_round_trip_keeps_everything(tmp_path: Path) -> None:
    params = CostModelParams(
        alpha=0.0512345678901234,
        beta=7.1,
        batch_thresh=22.4,
        gamma=0.0211,
        bandwidth_GBps=300.0,
        bytes_per_token=147456,
        metadata=ParamsMetadata(
            model="Qwen/Qwen3-8B",
            hardware="h100_sxm",
            transfer_path="nvlink",
            source="aiconfigurator",
            created_at="2026-01-01T00:00:00Z",
            fit_quality={"alpha": {"r_squared": 0.97, "warnings": []}},
            extra={"profile_id": "abc", "nested": {"k": [1, 2]}},
        ),
    )
    path = save_params(params, tmp_path / "sub" / "params.json")
    loaded = load_params(path)
    assert loaded == params
    assert loaded.params_id == params.params_id
    save_params(load_params(path), tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def _deep_json(p: Path) -> None:
    text = json.dumps(TEST_PARAMS)
    p.write_text(text[:-1] + ', "nested": ' + "[" * 100_000 + "]" * 100_000 + "}")


UNUSUAL_FILES: list[tuple[str, Callable[[Path], object], str]] = [
    ("directory", lambda p: p.mkdir(), "is a directory"),
    ("dangling symlink", lambda p: p.symlink_to(p.parent / "gone.json"), "file not found"),
    ("fifo", os.mkfifo, "not a regular file"),  # must not wait for a writer
    ("device", lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    ("too large", lambda p: p.write_bytes(b" " * (MAX_PARAMS_FILE_BYTES + 1)), "larger than"),
    ("nested too deep", _deep_json, "deep|not valid JSON"),
    ("integer too large", lambda p: write_params(p, alpha=10**400), "alpha|int too large"),
    ("binary", lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not valid JSON"),
]


@pytest.mark.parametrize(
    ("case", "make", "needle"), UNUSUAL_FILES, ids=[case for case, _, _ in UNUSUAL_FILES]
)
def test_unusual_files_are_one_line_errors_naming_the_file(
    tmp_path: Path, case: str, make: Callable[[Path], object], needle: str
) -> None:
    path = tmp_path / "params.json"
    make(path)
    with pytest.raises(InvalidParams, match=needle) as err:
        load_params(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message


def test_an_unreadable_file_is_refused_with_the_reason(params_file: Path, monkeypatch: Any) -> None:
    # Simulated: as root, permissions do not stop a read.
    def denied(*args: Any, **kwargs: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)  # the one os.open of load_params
    with pytest.raises(InvalidParams, match=r"params\.json: cannot read \(Permission denied\)"):
        load_params(params_file)


def test_the_bytes_returned_are_the_bytes_validated(params_file: Path) -> None:
    params, raw = load_params_and_bytes(params_file)
    assert raw == params_file.read_bytes()
    assert params == parse_params(raw)


def test_a_file_of_exactly_the_size_limit_is_read(tmp_path: Path) -> None:
    text = json.dumps(TEST_PARAMS)
    path = tmp_path / "params.json"
    path.write_text(text + " " * (MAX_PARAMS_FILE_BYTES - len(text)))
    assert load_params(path) == parse_params(text)
