"""The online estimator: frozen until enough values, robust to outliers, bounded, forgetting."""

from __future__ import annotations

import math
import random

import pytest

from pdroute_core.calibration import TERMS, CalibrationConfig, Calibrator, Contributions
from pdroute_core.routing.types import DISAGGREGATED


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
