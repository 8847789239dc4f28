"""``bench.bench_calibration`` end to end on a small Poisson load: the figures it prints and writes."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from bench.bench_calibration import converged_after, main
from pdroute_core.calibration import Corrections


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("cal")
    out = tmp_path / "cal.json"
    args = ["--trace", str(tmp_path / "none.csv"), "--max-requests", "4000", "--rate", "auto"]
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


@pytest.mark.xfail(
    strict=True,
    reason="known estimator gap: since the TPOT forms stopped charging a chunk to every decode "
    "step while prompts are pending, the decode correction settles below 1 (0.93 on the wrong "
    "params, 0.76 on the right ones) although the H100 decode step is slower than the H200's",
)
def test_the_decode_correction_moves_towards_the_slower_gpu(bench_run: tuple[str, dict[str, Any]]) -> None:
    _, doc = bench_run
    assert doc["runs"]["wrong+cal"]["corrections"]["decode"] > 1.05


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
