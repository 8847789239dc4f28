"""The params format: its structure, the one validation of its values, and ``params_id``.

The file loader and its hardening are tested in tests/solver/test_params.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pdroute_core.errors import InvalidParams
from pdroute_core.params import PARAM_NAMES, CostModelParams, parse_params
from tests.factories import TEST_PARAMS

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


def test_dataclass_validates_when_built_in_code() -> None:
    with pytest.raises(InvalidParams, match="alpha: must be finite"):
        CostModelParams(
            alpha=float("nan"), beta=1, batch_thresh=1, gamma=1, bandwidth_GBps=1, bytes_per_token=1
        )


def test_params_id_ignores_formatting_and_follows_values() -> None:
    compact = parse_params(json.dumps(RTX4090, separators=(",", ":")))
    spaced = parse_params(json.dumps(RTX4090, indent=4, sort_keys=True))
    reordered = parse_params(json.dumps(dict(reversed(list(RTX4090.items())))))
    as_float = parse_params(_text(batch_thresh=16.0))
    assert compact.params_id == spaced.params_id == reordered.params_id == as_float.params_id
    assert len(compact.params_id) == 12
    assert parse_params(_text(alpha=0.0501)).params_id != compact.params_id
    assert parse_params(_text(metadata={"model": "other"})).params_id != compact.params_id
