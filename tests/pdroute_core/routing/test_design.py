"""The analytical cost model's formulas and its vectorised form (params: tests/solver/test_params.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.params import CostModelParams, params_from_dict
from pdroute_core.routing.design import AnalyticalCostModel
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED
from tests.factories import TEST_PARAMS

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
