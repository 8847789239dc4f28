"""``bench.bench_calibration`` end to end on a small Poisson load: the figures it prints and writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_calibration import converged_after, main
from pdroute_core.calibration import Corrections


def test_bench_shows_calibration_correcting_wrong_params(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    args = [
        "--trace",
        str(tmp_path / "none.csv"),
        "--max-requests",
        "4000",
        "--rate",
        "auto",
        "--json",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "wrong+cal" in printed and "ratios:" in printed
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    assert runs["right"]["slo_attainment"] >= 0.9  # the load the search picked
    assert set(runs) == {"right", "wrong", "wrong+cal", "right+cal"}
    # The wrong params mispredict; calibration brings the error down.
    assert runs["wrong+cal"]["e2e_err_p50_pct"] < 0.5 * runs["wrong"]["e2e_err_p50_pct"]
    assert runs["wrong+cal"]["corrections"]["decode"] > 1.05  # the H100 decode step is slower than the H200's
    for k in runs["wrong+cal"]["corrections"].values():
        assert 0.5 <= k <= 2.0
    assert doc["ratios"]["goodput_wrong_cal_over_right"] == pytest.approx(
        runs["wrong+cal"]["goodput_rps"] / runs["right"]["goodput_rps"]
    )


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
