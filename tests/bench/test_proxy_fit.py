"""The replay bench's quick fit: the prefill curves' fit and the params it writes."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.proxy_fit import PREFILL_LENGTHS, handoff_ms_per_token, params_of, quadratic_fit
from pdroute_core.params import parse_params


def test_the_quadratic_fit_recovers_a_curve_with_attention() -> None:
    floor, per_token, sq = 40.0, 2.5, 7e-4
    table = {n: floor + per_token * n + sq * n * n for n in PREFILL_LENGTHS}
    assert quadratic_fit(table) == pytest.approx((floor, per_token, sq), rel=1e-6)


def test_the_quadratic_fit_weighs_each_length_by_its_own_time() -> None:
    # The decode engine's measured prefill times on the heavy model (ms): convex. A straight line
    # by least squares over-charged the middle lengths by up to 42 %; this fit stays within 4 %.
    table = {64: 213.7, 256: 733.6, 512: 1524.3, 1024: 3279.5, 2048: 8243.3}
    floor, per_token, sq = quadratic_fit(table)
    assert min(floor, per_token, sq) >= 0 and sq > 0
    for n, ms in table.items():
        assert floor + per_token * n + sq * n * n == pytest.approx(ms, rel=0.04)


def test_the_quadratic_fit_keeps_every_coefficient_non_negative() -> None:
    # A curve that bends down (a noisy run) gets no negative attention term.
    table = {64: 300.0, 256: 900.0, 512: 1700.0, 1024: 3000.0, 2048: 5200.0}
    floor, per_token, sq = quadratic_fit(table)
    assert (floor >= 0, per_token > 0, sq) == (True, True, 0.0)


def _fit(prefill_sq: float) -> dict[str, float]:
    return {
        "prefill_floor_ms": 53.0,
        "prefill_ms_per_token": 2.2,
        "prefill_ms_per_token_sq": prefill_sq,
        "chunk_ms_per_token": 2.5,
        "chunk_ms_per_token_sq": 7e-4,
        "decode_base_ms": 47.0,
        "decode_ms_per_seq": 3.1,
        "handoff_bandwidth_GBps": 0.05,
    }


@pytest.mark.parametrize("prefill_sq", [6e-4, 0.0])
def test_the_params_carry_the_prefill_engine_s_curve_and_the_decode_engine_s_chunk_cost(
    prefill_sq: float,
) -> None:
    raw = params_of(_fit(prefill_sq), 8192, "heavy")
    params = parse_params(json.dumps(raw))  # a file the service and the proxy load
    qa = params.queue_aware
    assert qa is not None
    assert (qa.prefill_floor_ms, qa.prefill_ms_per_token, qa.prefill_ms_per_token_sq) == (
        53.0,
        2.2,
        prefill_sq,
    )
    assert (qa.chunk_ms_per_token, qa.chunk_ms_per_token_sq) == (2.5, 7e-4)
    assert ("prefill_ms_per_token_sq" in raw["queue_aware"]) == (prefill_sq > 0)  # optional in a file
    # The design's per-token costs: at the mean measured length, attention included.
    assert raw["alpha"] == pytest.approx(2.2 + prefill_sq * statistics.mean(PREFILL_LENGTHS))
    assert raw["gamma"] == pytest.approx(2.5 + 7e-4 * statistics.mean(PREFILL_LENGTHS))


def test_the_hand_off_costs_its_slope_per_token_not_its_fixed_part() -> None:
    # 2 ms a token plus 150 ms of fixed work (the step, the partial block computed again).
    loaded = {512: 150.0 + 2.0 * 512, 2048: 150.0 + 2.0 * 2048}
    assert handoff_ms_per_token(loaded, step_ms=45.0) == pytest.approx(2.0)


def test_a_hand_off_without_a_slope_falls_back_to_the_longer_length_per_token() -> None:
    loaded = {512: 900.0, 2048: 850.0}  # noise: the longer one answered sooner
    assert handoff_ms_per_token(loaded, step_ms=50.0) == pytest.approx(800.0 / 2048)
