"""Online calibration: the term split against the model, the estimator's robustness and bounds."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.calibration import (
    IDENTITY,
    TERMS,
    CalibrationConfig,
    Calibrator,
    Contributions,
    Corrections,
    calibrated_model,
    calibrated_params,
    contributions,
)
from pdroute_core.params import params_from_dict
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, RouteColumns, RouteInputs
from tests.conftest import TEST_PARAMS

FORMS = {
    "prefill_floor_ms": 10.0,
    "prefill_ms_per_token": 0.02,
    "prefill_knee_tokens": 100.0,
    "decode_base_ms": 5.0,
    "decode_ms_per_seq": 0.01,
    "decode_ms_per_context_token": 1e-5,
    "chunk_ms_per_token": 0.01,
    "chunk_ms_per_token_sq": 1e-6,
    "chunk_ms_per_token_seq": 1e-5,
}


def _model() -> QueueAwareModel:
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS}
    return QueueAwareModel(params_from_dict(doc))


inputs = st.builds(
    RouteInputs,
    prompt_len=st.integers(2, 20_000),
    predicted_output_len=st.integers(1, 2_000),
    system_load=st.integers(0, 200),
    decode_batch_size=st.integers(0, 200),
    chunk_size=st.integers(64, 2048),
    prefill_queue_requests=st.none() | st.integers(0, 30),
    prefill_queue_tokens=st.none() | st.integers(1, 100_000),
    prefill_running_requests=st.none() | st.integers(0, 4),
    prefill_pool_gpus=st.none() | st.integers(1, 4),
    pending_prefill_tokens=st.none() | st.integers(0, 20_000),
    decode_pending_prefill_tokens=st.none() | st.integers(0, 20_000),
    cached_prompt_tokens=st.none() | st.integers(0, 20_000),
)
corrections = st.builds(Corrections, *[st.floats(0.5, 2.0) for _ in TERMS])


def _predicted(k: Corrections, parts: dict[str, float]) -> float:
    eff = {t: float(getattr(k, t)) * (k.prefill if t == "queue_wait" else 1.0) for t in TERMS}
    return sum(eff[t] * v for t, v in parts.items())


@settings(max_examples=300, deadline=None)
@given(x=inputs, k=corrections)
def test_contributions_times_corrections_are_the_calibrated_models_prediction(
    x: RouteInputs, k: Corrections
) -> None:
    raw = _model()
    cal = calibrated_model(raw, k)
    b = cal.decide(x)
    for path, ttft, tpot in (
        (COLLOCATED, b.ttft_collocated_ms, b.tpot_collocated_ms),
        (DISAGGREGATED, b.ttft_disaggregated_ms, b.tpot_disaggregated_ms),
    ):
        parts = contributions(raw, x, path)
        assert _predicted(k, parts.ttft) == pytest.approx(ttft, rel=1e-9, abs=1e-9)
        assert _predicted(k, parts.tpot) == pytest.approx(tpot, rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(x=inputs)
def test_identity_corrections_leave_every_answer_bit_identical(x: RouteInputs) -> None:
    raw = _model()
    assert calibrated_model(raw, IDENTITY) is raw
    rebuilt = QueueAwareModel(calibrated_params(raw.params, IDENTITY), queue_wait_scale=1.0)
    assert rebuilt.decide(x) == raw.decide(x)


def _tpot_parts(decode_ms: float = 10.0) -> Contributions:
    return Contributions(DISAGGREGATED, {"prefill": 50.0}, {"decode": decode_ms}, 100)


def test_frozen_at_one_until_enough_observations() -> None:
    cal = Calibrator(CalibrationConfig(min_observations=20))
    for _ in range(19):
        cal.observe(_tpot_parts(), tpot_ms=15.0)
    assert cal.refresh().decode == 1.0
    cal.observe(_tpot_parts(), tpot_ms=15.0)
    assert cal.refresh().decode == pytest.approx(1.5)


def test_recovers_each_dominant_term_under_noise_and_outliers() -> None:
    rng = random.Random(1)
    truth = {"prefill": 1.3, "decode": 0.7, "queue_wait": 1.6}
    cal = Calibrator(CalibrationConfig(min_observations=30))
    for i in range(3000):
        if i % 50 == 0:
            cal.refresh()
        wait = rng.choice([0.0, 0.0, 400.0])  # queues form now and then: the wait dominates those
        parts = Contributions(
            DISAGGREGATED, {"queue_wait": wait, "prefill": 100.0, "transfer": 5.0}, {"decode": 20.0}, 50
        )
        noise = rng.lognormvariate(0.0, 0.1)
        true_ttft = truth["queue_wait"] * truth["prefill"] * wait + truth["prefill"] * 100.0 + 5.0
        ttft = true_ttft * noise
        tpot = truth["decode"] * 20.0 * noise
        if rng.random() < 0.2:  # a fifth of the feedback is wildly wrong (still inside the gate)
            ttft, tpot = ttft * 6.0, tpot * 0.2
        cal.observe(parts, ttft_ms=ttft, tpot_ms=tpot)
    k = cal.refresh()
    for term, value in truth.items():
        assert getattr(k, term) == pytest.approx(value, rel=0.08), term
    assert k.transfer == 1.0  # never dominant: never learnt
    assert k.chunk == 1.0


@pytest.mark.parametrize("observed", [1e12, 1e-12, 0.0, -5.0, math.nan, math.inf, 5e5])
def test_wild_feedback_never_leaves_the_bounds(observed: float) -> None:
    cfg = CalibrationConfig(min_observations=1, lower=0.5, upper=2.0)
    cal = Calibrator(cfg)
    for _ in range(200):
        cal.observe(_tpot_parts(), ttft_ms=observed, tpot_ms=observed, e2e_ms=observed)
        k = cal.refresh()
        for term in TERMS:
            assert cfg.lower <= getattr(k, term) <= cfg.upper
    if not (math.isfinite(observed) and observed >= 0):
        assert cal.num_rejected > 0


def test_a_ratio_beyond_the_bound_but_inside_the_gate_is_clipped() -> None:
    cal = Calibrator(CalibrationConfig(min_observations=1, upper=2.0))
    for _ in range(10):
        cal.observe(_tpot_parts(), tpot_ms=50.0)  # 5x
    assert cal.refresh().decode == 2.0


def test_forgetting_follows_a_change() -> None:
    cal = Calibrator(CalibrationConfig(min_observations=10, forgetting=0.02, window=512))
    for _ in range(300):
        cal.observe(_tpot_parts(), tpot_ms=8.0)
    assert cal.refresh().decode == pytest.approx(0.8)
    for _ in range(100):
        cal.observe(_tpot_parts(), tpot_ms=12.0)
    assert cal.refresh().decode == pytest.approx(1.2)


def test_tpot_from_e2e_when_missing_and_error_summary() -> None:
    cal = Calibrator(CalibrationConfig(min_observations=1))
    cal.observe(
        _tpot_parts(), ttft_ms=60.0, e2e_ms=60.0 + 99 * 13.0, predicted_ttft_ms=50.0, predicted_e2e_ms=1000.0
    )
    assert cal.refresh().decode == pytest.approx(1.3)
    s = cal.error_summary("ttft")
    assert s.num == 1 and s.median_pct == pytest.approx(100 * 10 / 60)
    assert cal.error_summary("e2e").median_pct == pytest.approx(100 * abs(1000 - 1347) / 1347)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lower": 1.2},
        {"upper": 0.9},
        {"lower": 0.0},
        {"forgetting": 1.0},
        {"min_observations": 0},
        {"max_ratio": 1.0},
    ],
)
def test_config_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CalibrationConfig(**kwargs)  # type: ignore[arg-type]  # floats into int fields on purpose


def test_queue_wait_scale_validated() -> None:
    with pytest.raises(ValueError, match="queue_wait_scale"):
        QueueAwareModel(_model().params, queue_wait_scale=0.0)


@settings(max_examples=100, deadline=None)
@given(xs=st.lists(inputs, min_size=1, max_size=20), k=corrections)
def test_a_calibrated_model_decides_the_same_bits_one_by_one_and_vectorised(
    xs: list[RouteInputs], k: Corrections
) -> None:
    cal = calibrated_model(_model(), k)
    assert cal.decide_many(RouteColumns.from_inputs(xs)).rows() == [cal.decide(x) for x in xs]
