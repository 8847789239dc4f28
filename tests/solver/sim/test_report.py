"""Metrics from hand-made records: percentiles, TPOT, throughput, goodput, tables."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from solver.errors import InvalidSimConfig
from solver.sim import SimRecords, SloLimits, format_markdown, format_table, littles_law, summarize
from solver.sim.records import RECORDED_VIEW_FIELDS, time_average_in_system


def records(
    arrival: list[float],
    first: list[float],
    finish: list[float],
    output: list[int],
    disagg: list[bool],
    *,
    shed: list[bool] | None = None,
    predicted_ttft: list[float] | None = None,
    predicted_e2e: list[float] | None = None,
) -> SimRecords:
    n = len(arrival)
    ints = np.zeros(n, dtype=np.int64)
    nan = np.full(n, np.nan)
    is_shed = np.array(shed if shed is not None else [False] * n)
    view: dict[str, Any] = {name: ints for name in RECORDED_VIEW_FIELDS}
    return SimRecords(
        policy="hand",
        arrival_ms=np.array(arrival),
        first_token_ms=np.array(first),
        finish_ms=np.array(finish),
        prefill_start_ms=nan,
        prompt_len=ints + 10,
        output_len=np.array(output),
        predicted_output_len=np.array(output),
        is_disaggregated=np.array(disagg),
        was_policy_asked=np.ones(n, dtype=np.bool_),
        **view,
        predicted_ttft_ms=nan if predicted_ttft is None else np.array(predicted_ttft),
        predicted_e2e_ms=nan if predicted_e2e is None else np.array(predicted_e2e),
        is_infeasible=is_shed.copy(),
        is_shed=is_shed,
        engine_index=ints,
        tokens_generated=np.where(is_shed, 0, np.array(output)),
        finish_count=np.where(is_shed, 0, 1),
        total_tokens_generated=sum(output),
        num_engine_steps=0,
        num_prefill_forwards=0,
        num_extrapolated_steps=0,
    )


# Four requests; times in ms.
#   arrival first finish output  TTFT  e2e   TPOT
#   0       100   1100   11      100   1100  100
#   1000    1050  1550   6       50    550   100
#   2000    2400  2430   4       400   430   10
#   3000    3020  3020   1       20    20    -   (one token: no TPOT)
REC = records(
    arrival=[0, 1000, 2000, 3000],
    first=[100, 1050, 2400, 3020],
    finish=[1100, 1550, 2430, 3020],
    output=[11, 6, 4, 1],
    disagg=[True, False, False, True],
)


def test_latencies_and_tpot() -> None:
    assert REC.ttft_ms.tolist() == [100, 50, 400, 20]
    assert REC.e2e_ms.tolist() == [1100, 550, 430, 20]
    tpot = REC.tpot_ms
    assert tpot[:3].tolist() == [100, 100, 10] and math.isnan(tpot[3])


def test_summary_by_hand() -> None:
    m = summarize(REC, offered_rate=1.0, slo=SloLimits(ttft_ms=200, tpot_ms=50))
    assert m.e2e_ms.mean == pytest.approx(525.0)
    assert m.e2e_ms.p50 == pytest.approx(490.0)  # between 430 and 550
    assert m.ttft_ms.p90 == pytest.approx(np.percentile([100, 50, 400, 20], 90))
    assert m.tpot_ms.mean == pytest.approx(70.0)  # the one-token request is left out
    assert m.makespan_s == pytest.approx(3.02)
    assert m.throughput_rps == pytest.approx(4 / 3.02)
    assert m.throughput_tokens_per_s == pytest.approx(22 / 3.02)
    # Only the one-token request meets both limits (TTFT 20 <= 200, no TPOT).
    assert m.slo_attainment == pytest.approx(0.25)
    assert m.goodput_rps == pytest.approx(1 / 3.02)
    assert m.share_disaggregated == pytest.approx(0.5)
    loose = summarize(REC, 1.0, SloLimits(ttft_ms=1000, tpot_ms=100))
    assert loose.slo_attainment == 1.0


def test_tables() -> None:
    metrics = [summarize(REC, 1.0, SloLimits()), summarize(REC, 2.5, SloLimits())]
    table = format_table(metrics).splitlines()
    assert len(table) == 4 and table[0].startswith("policy")
    assert "2.50" in table[3] and "50.0" in table[3]  # rate and share disaggregated
    md = format_markdown(metrics).splitlines()
    assert md[0].startswith("| policy |") and md[1].startswith("|---|")
    assert md[2].count("|") == md[0].count("|")


def test_littles_law_helper_by_hand() -> None:
    # In [0, 3000): request 0 in system 1100 ms, request 1 550 ms, request 2 430 ms (all inside).
    assert time_average_in_system(REC, 0, 3000) == pytest.approx(2080 / 3000)
    in_system, lam_w = littles_law(REC, 0, 3000)
    assert lam_w == pytest.approx(3 / 3000 * (1100 + 550 + 430) / 3)
    assert in_system == pytest.approx(lam_w)


def test_bad_slo() -> None:
    with pytest.raises(InvalidSimConfig):
        SloLimits(ttft_ms=0)


def test_shed_requests_are_misses_and_out_of_the_latencies() -> None:
    # Request 1 (TTFT 50 ms) is shed: no times; the others as in REC.
    rec = records(
        arrival=[0, 1000, 2000, 3000],
        first=[100, math.nan, 2400, 3020],
        finish=[1100, math.nan, 2430, 3020],
        output=[11, 6, 4, 1],
        disagg=[True, False, False, True],
        shed=[False, True, False, False],
    )
    m = summarize(rec, 1.0, SloLimits(ttft_ms=1000, tpot_ms=100))
    assert m.share_shed == pytest.approx(0.25) and m.share_infeasible == pytest.approx(0.25)
    assert m.slo_attainment == pytest.approx(0.75)  # every served request meets the loose SLO
    assert m.ttft_ms.p50 == pytest.approx(100.0)  # median of 100, 400, 20: the shed one left out
    assert m.e2e_ms.mean == pytest.approx((1100 + 430 + 20) / 3)
    assert m.makespan_s == pytest.approx(3.02)
    assert m.throughput_rps == pytest.approx(3 / 3.02)  # finished requests only
    assert m.throughput_tokens_per_s == pytest.approx(16 / 3.02)
    assert m.goodput_rps == pytest.approx(3 / 3.02)
    assert "25.0" in format_table([m]).splitlines()[2]  # the shed % column


def test_makespan_when_every_request_is_shed() -> None:
    nan = math.nan
    rec = records([0, 500], [nan, nan], [nan, nan], [3, 3], [False, False], shed=[True, True])
    m = summarize(rec, 1.0, SloLimits())
    assert m.makespan_s == pytest.approx(0.5) and m.goodput_rps == 0.0 and m.e2e_ms.p50 is None


def test_prediction_error_in_the_metrics_and_tables() -> None:
    # TTFT 100, 50, 400, 20 predicted as 110, 50, 300, nan (the last one not predicted).
    rec = records(
        arrival=[0, 1000, 2000, 3000],
        first=[100, 1050, 2400, 3020],
        finish=[1100, 1550, 2430, 3020],
        output=[11, 6, 4, 1],
        disagg=[True, False, False, True],
        predicted_ttft=[110, 50, 300, math.nan],
        predicted_e2e=[1100, 500, 430, 40],
    )
    m = summarize(rec, 1.0, SloLimits())
    assert m.ttft_error is not None and m.e2e_error is not None
    assert m.ttft_error.num_predicted == 3
    assert m.ttft_error.median_abs_ms == pytest.approx(10.0)  # |errors| 10, 0, 100
    assert m.ttft_error.p90_abs_ms == pytest.approx(np.percentile([10, 0, 100], 90))
    assert m.ttft_error.median_rel_pct == pytest.approx(10.0)  # 10 %, 0 %, 25 %
    assert m.e2e_error.num_predicted == 4
    assert m.e2e_error.median_abs_ms == pytest.approx(10.0)  # |errors| 0, 50, 0, 20
    assert m.e2e_error.p90_rel_pct == pytest.approx(np.percentile([0, 50 / 550 * 100, 0, 100], 90))
    table = format_table([m, summarize(REC, 1.0, SloLimits())])
    assert "prediction error" in table
    error_rows = table.split("prediction error")[1].strip().splitlines()[3:]
    assert len(error_rows) == 1 and error_rows[0].split()[:3] == ["hand", "1.00", "10.0"]
    md = format_markdown([m])
    assert "| hand | 1.00 | 10.0 |" in md
    assert summarize(REC, 1.0, SloLimits()).ttft_error is None  # no prediction, no error
    assert "prediction error" not in format_table([summarize(REC, 1.0, SloLimits())])
