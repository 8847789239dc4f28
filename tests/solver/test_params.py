"""The params file: its format, the one validation of its values, and the one loader.

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

from solver.errors import InvalidParams
from solver.params import (
    MAX_PARAMS_FILE_BYTES,
    PARAM_NAMES,
    CostModelParams,
    ParamsMetadata,
    load_params,
    load_params_and_bytes,
    parse_params,
    save_params,
)
from solver.routing.design import AnalyticalCostModel
from tests.conftest import TEST_PARAMS, write_params

# The design's RTX 4090 figures (gamma, pinned-relay bandwidth, Qwen3-8B KV bytes, batch_thresh)
# with round alpha and beta.
RTX4090: dict[str, Any] = {
    **TEST_PARAMS,
    "metadata": {"model": "Qwen/Qwen3-8B", "hardware": "RTX 4090", "transfer_path": "pinned-relay"},
}


# --- the format and its validation -----------------------------------------------------------
def _text(**changes: Any) -> str:
    data = json.loads(json.dumps(RTX4090))
    for key, value in changes.items():
        if value is _DELETE:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data)


_DELETE = object()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        *[(_text(**{name: _DELETE}), f"{name}: missing") for name in PARAM_NAMES],
        (_text(alpha="0.05"), "alpha: expected a number"),
        (_text(beta=True), "beta: expected a number"),
        (_text(gamma=None), "gamma: expected a number"),
        (_text(batch_thresh=[16]), "batch_thresh: expected a number"),
        (_text(bandwidth_GBps={"value": 1}), "bandwidth_GBps: expected a number"),
        (_text(alpha=0), "alpha: must be > 0"),
        (_text(gamma=-0.1), "gamma: must be > 0"),
        (_text(batch_thresh=0.0), "batch_thresh: must be > 0"),
        (_text(bytes_per_token=-4), "bytes_per_token: must be > 0"),
        (_text(bytes_per_token=1.5), "bytes_per_token: must be an integer"),
        (_text(alpha=1).replace('"alpha": 1', '"alpha": NaN'), "non-finite number NaN"),
        (_text(beta=1).replace('"beta": 1', '"beta": Infinity'), "non-finite number Infinity"),
        (_text(gamma=1).replace('"gamma": 1', '"gamma": 1e400'), "gamma: must be finite"),
        (_text(schema_version=3), "schema_version: unsupported version 3"),
        (_text(schema_version=2), "queue_aware: missing"),
        (_text(schema_version="1"), "schema_version: unsupported version '1'"),
        (_text(schema_version=_DELETE), "schema_version: missing"),
        (_text(metadata=[]), "metadata: expected an object"),
        (_text(metadata={"model": 8}), "metadata.model: expected a string"),
        (_text(metadata={"fit_quality": "good"}), "metadata.fit_quality: expected an object"),
        (_text(alpha=10**400), "alpha: 1000.* is out of range"),
        (_text(bandwidth_GBps=1e-320), "bandwidth_GBps: 1e-320 is outside the plausible range"),
        (_text(alpha=1e308), "alpha: 1e\\+308 is outside the plausible range"),
        (_text(bytes_per_token=10**12), "bytes_per_token: 1000000000000 is outside the plausible range"),
        (
            _text(metadata={"extra": [1]}).replace("[1]", "[1e999]"),
            "metadata.extra.0.: non-finite number inf",
        ),
        (
            _text(metadata={"extra": 1}).replace('"extra": 1', '"extra": ' + "[" * 100_000 + "]" * 100_000),
            "nested too deeply",
        ),
        ("{not json", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_params_are_refused_with_the_field_and_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidParams, match=message.replace("[", r"\[")):
        parse_params(text)


def test_bad_params_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidParams, match="file not found"):
        load_params(tmp_path / "absent.json")
    with pytest.raises(InvalidParams, match="is a directory"):
        load_params(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(_text(alpha=-1))
    with pytest.raises(InvalidParams, match=f"{bad}: alpha: must be > 0"):
        AnalyticalCostModel(load_params(bad))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InvalidParams, match="not valid JSON"):
        load_params(binary)


def test_dataclass_validates_when_built_in_code() -> None:
    with pytest.raises(InvalidParams, match="alpha: must be finite"):
        CostModelParams(
            alpha=float("nan"), beta=1, batch_thresh=1, gamma=1, bandwidth_GBps=1, bytes_per_token=1
        )


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


def test_params_id_ignores_formatting_and_follows_values() -> None:
    compact = parse_params(json.dumps(RTX4090, separators=(",", ":")))
    spaced = parse_params(json.dumps(RTX4090, indent=4, sort_keys=True))
    reordered = parse_params(json.dumps(dict(reversed(list(RTX4090.items())))))
    as_float = parse_params(_text(batch_thresh=16.0))
    assert compact.params_id == spaced.params_id == reordered.params_id == as_float.params_id
    assert len(compact.params_id) == 12
    assert parse_params(_text(alpha=0.0501)).params_id != compact.params_id
    assert parse_params(_text(metadata={"model": "other"})).params_id != compact.params_id


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
