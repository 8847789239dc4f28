"""The analytical cost model's formulas, its vectorised form, and the params file it reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import InvalidParams
from solver.params import (
    PARAM_NAMES,
    CostModelParams,
    ParamsMetadata,
    load_params,
    params_from_dict,
    parse_params,
    save_params,
)
from solver.routing.design import AnalyticalCostModel
from solver.routing.types import COLLOCATED, DISAGGREGATED
from tests.conftest import TEST_PARAMS

# The design's RTX 4090 figures (gamma, pinned-relay bandwidth, Qwen3-8B KV bytes, batch_thresh)
# with round alpha and beta.
RTX4090: dict[str, Any] = {
    **TEST_PARAMS,
    "metadata": {"model": "Qwen/Qwen3-8B", "hardware": "RTX 4090", "transfer_path": "pinned-relay"},
}
# Hand-computed: 147456 B / (12.9 GB/s * 1e6) in ms per token.
TRANSFER_MS_PER_TOKEN = 147456 / 12.9e6


@pytest.fixture
def model() -> AnalyticalCostModel:
    return AnalyticalCostModel(params_from_dict(RTX4090))


# --- hand-computed cases ------------------------------------------------------------------------
def test_load_zero(model: AnalyticalCostModel) -> None:
    b = model.explain(1000, 100, 0)
    assert b.prefill_ms == pytest.approx(50.0)  # 0.05 * 1000
    assert b.transfer_ms == pytest.approx(11.430697674)  # 1000 * 147456 / 12.9e6
    assert b.interference_ms == 0.0
    assert b.decode_collocated_ms == pytest.approx(2000.0)  # beta * 100 (load 0 <= thresh)
    assert b.decode_disaggregated_ms == pytest.approx(2000.0)  # batch 1 + 1 = 2 <= thresh
    assert b.t_collocated_ms == pytest.approx(2050.0)
    assert b.t_disaggregated_ms == pytest.approx(2061.430697674)
    assert b.decision == COLLOCATED
    assert b.saving_ms == pytest.approx(11.430697674)


def test_load_at_batch_thresh(model: AnalyticalCostModel) -> None:
    b = model.explain(1000, 100, 16)
    assert b.interference_ms == pytest.approx(86.9)  # 0.0869 * 1000 * 16 / 16
    assert b.decode_collocated_ms == pytest.approx(2000.0)  # 16 <= 16: still memory-bound
    assert b.t_collocated_ms == pytest.approx(2136.9)
    assert b.decision == DISAGGREGATED


@pytest.mark.parametrize(("load", "step_ms"), [(17, 21.25), (32, 40.0), (64, 80.0)])
def test_load_beyond_batch_thresh(model: AnalyticalCostModel, load: int, step_ms: float) -> None:
    b = model.explain(1000, 100, load)
    assert model.t_decode_step(load) == pytest.approx(step_ms)  # 20 * load / 16
    assert b.interference_ms == pytest.approx(86.9)  # capped at batch_thresh
    assert b.t_collocated_ms == pytest.approx(50.0 + 100 * step_ms + 86.9)


def test_decode_batch_of_the_target_gpu_enters_t_disaggregated(model: AnalyticalCostModel) -> None:
    b = model.explain(1000, 100, 0, decode_batch_size=20)
    assert b.decode_disaggregated_ms == pytest.approx(100 * 20.0 * 21 / 16)
    assert model.t_disaggregated(1000, 100) == pytest.approx(50.0 + 11.430697674 + 2000.0)
    assert model.t_collocated(1000, 100, 16) == pytest.approx(2136.9)


def test_rtx4090_break_even_example(model: AnalyticalCostModel) -> None:
    expected = 16 * TRANSFER_MS_PER_TOKEN / 0.0869
    assert expected == pytest.approx(2.1046, abs=1e-4)
    assert model.break_even_load == pytest.approx(expected, rel=1e-12)
    assert model.params.transfer_rate_ms_per_token == pytest.approx(TRANSFER_MS_PER_TOKEN, rel=1e-12)
    # Prefill is the same on both paths and the decode terms are equal below batch_thresh,
    # so the decision is transfer vs interference: collocated at load 2, disaggregated at 3.
    for prompt_len in (64, 1024, 8192):
        at2, at3 = model.explain(prompt_len, 200, 2), model.explain(prompt_len, 200, 3)
        assert at3.interference_ms > at3.transfer_ms > at2.interference_ms
        assert (at2.decision, at3.decision) == (COLLOCATED, DISAGGREGATED)
        assert model.route(prompt_len, 200, 3) == (DISAGGREGATED, at3.t_collocated_ms, at3.t_disaggregated_ms)


# --- scalar and vectorised agree bit for bit --------------------------------------------------
params_strategy = st.builds(
    CostModelParams,
    alpha=st.floats(1e-5, 1.0),
    beta=st.floats(0.01, 200.0),
    batch_thresh=st.floats(1.0, 512.0),
    gamma=st.floats(1e-5, 1.0),
    bandwidth_GBps=st.floats(0.01, 2000.0),
    bytes_per_token=st.integers(1, 10**7),
)
request_strategy = st.tuples(
    st.integers(1, 10**6),  # prompt_len
    st.integers(1, 10**5),  # predicted_output_len
    st.integers(0, 4096),  # system_load
    st.integers(0, 4096),  # decode_batch_size
)


@settings(max_examples=300, deadline=None)
@given(params=params_strategy, requests=st.lists(request_strategy, min_size=1, max_size=40))
def test_route_many_equals_scalar_route_bit_for_bit(
    params: CostModelParams, requests: list[tuple[int, int, int, int]]
) -> None:
    model = AnalyticalCostModel(params)
    cols = np.array(requests, dtype=np.int64).T
    batch = model.route_many(cols[0], cols[1], cols[2], cols[3])
    assert batch.decisions() == [model.route(*r)[0] for r in requests]
    for i, r in enumerate(requests):
        one = model.explain(*r)
        got = (
            batch.t_collocated_ms[i],
            batch.t_disaggregated_ms[i],
            batch.prefill_ms[i],
            batch.transfer_ms[i],
            batch.interference_ms[i],
            batch.decode_collocated_ms[i],
            batch.decode_disaggregated_ms[i],
        )
        want = (
            one.t_collocated_ms,
            one.t_disaggregated_ms,
            one.prefill_ms,
            one.transfer_ms,
            one.interference_ms,
            one.decode_collocated_ms,
            one.decode_disaggregated_ms,
        )
        assert [float(v) for v in got] == list(want)  # exact equality, no tolerance


# --- the params file ----------------------------------------------------------------------------
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
