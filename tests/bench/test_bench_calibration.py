"""``bench.bench_calibration`` end to end on a small Poisson load: the figures it prints and writes."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import numpy as np
import pytest

from bench.bench_calibration import before_drain, converged_after, main
from pdroute_core.calibration import Corrections


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("cal")
    out = tmp_path / "cal.json"
    args = [
        "--trace",
        str(tmp_path / "none.csv"),
        "--max-requests",
        "4000",
        "--rate",
        "auto",
        "--allow-extrapolation",
    ]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main([*args, "--json", str(out)]) == 0
    return buffer.getvalue(), json.loads(out.read_text())


def test_bench_shows_calibration_correcting_wrong_params(bench_run: tuple[str, dict[str, Any]]) -> None:
    printed, doc = bench_run
    assert "wrong+cal" in printed and "ratios:" in printed
    runs = doc["runs"]
    assert runs["right"]["slo_attainment"] >= 0.9  # the load the search picked
    assert set(runs) == {"right", "wrong", "wrong+cal", "right+cal"}
    # The wrong params mispredict; calibration brings the error down and the goodput back.
    assert runs["wrong+cal"]["e2e_err_p50_pct"] < 0.67 * runs["wrong"]["e2e_err_p50_pct"]
    assert runs["wrong+cal"]["goodput_rps"] > runs["wrong"]["goodput_rps"]
    for k in runs["wrong+cal"]["corrections"].values():
        assert 0.5 <= k <= 2.0
    assert doc["ratios"]["goodput_wrong_cal_over_right"] == pytest.approx(
        runs["wrong+cal"]["goodput_rps"] / runs["right"]["goodput_rps"]
    )


def test_the_corrections_under_load_point_at_the_slower_gpu(bench_run: tuple[str, dict[str, Any]]) -> None:
    _, doc = bench_run
    runs = doc["runs"]
    # The fleet's H100 decode step is slower than the H200 params say: the correction in force
    # while the load runs rises; on the right params every correction stays near 1.
    assert runs["wrong+cal"]["corrections"]["decode"] > 1.05
    for term, k in runs["right+cal"]["corrections"].items():
        assert k == pytest.approx(1.0, abs=0.1), term
    # The drain after the last arrival runs every decode faster than its batch at arrival said.
    assert runs["right+cal"]["corrections_after_drain"]["decode"] < runs["right+cal"]["corrections"]["decode"]


def test_before_drain_keeps_the_refreshes_made_before_the_last_arrival() -> None:
    arrival = np.array([0.0, 10.0, 20.0, 30.0])
    finish = np.array([5.0, 25.0, 60.0, np.nan])  # two finished by the last arrival; one shed
    history = [(1, Corrections(decode=1.2)), (2, Corrections(decode=1.3)), (3, Corrections(decode=0.9))]
    assert before_drain(history, arrival, finish) == history[:2]
    assert before_drain([], arrival, finish) == []


def test_converged_after_is_the_last_move_beyond_five_percent() -> None:
    history = [
        (50, Corrections(decode=1.0)),
        (100, Corrections(decode=1.4)),
        (150, Corrections(decode=1.31)),
        (200, Corrections(decode=1.3)),
    ]
    assert converged_after(history, "decode") == 100
    assert converged_after(history, "prefill") == 0
    assert converged_after([], "decode") is None
