"""``bench.bench_prefill_wait``: the model's prefill wait against the simulator's, by placement."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from bench.bench_prefill_wait import WaitProbe, main, wait_figures
from tests.factories import qa_model


def test_wait_figures_compare_the_requests_that_waited_on_the_pool() -> None:
    probe = WaitProbe(qa_model(), 4)
    probe.wait[:] = [100.0, 200.0, 10.0, 50.0]
    probe.ttft[:] = [150.0, 300.0, 100.0, 80.0]
    actual_wait = np.array([110.0, 100.0, 30.0, np.nan])  # request 3 was collocated
    actual_ttft = np.array([160.0, 200.0, 120.0, 90.0])
    row = wait_figures(probe, actual_wait, actual_ttft)
    assert row["num_disaggregated"] == 3
    assert row["wait_ratio_of_means"] == pytest.approx(240.0 / 310.0)
    assert row["num_predicted_wait"] == 3
    assert row["wait_ratio_median"] == pytest.approx(1.1)  # of 1.1, 0.5 and 3.0
    assert row["share_within"] == pytest.approx(1 / 3)
    assert row["num_wait_dominated"] == 2  # request 2's wait is a tenth of its TTFT
    assert row["implied_k_median"] == pytest.approx((1.1 + 0.5) / 2)


def test_round_robin_placement_spreads_the_wait_the_pool_inputs_predict(tmp_path: Path) -> None:
    out = tmp_path / "wait.json"
    args = [
        "--trace",
        str(tmp_path / "none.csv"),
        "--max-requests",
        "4000",
        "--rates",
        "175,181.02",
        "--allow-extrapolation",
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*args, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["runs"]
    assert [(r["rate"], r["prefill_queue"]) for r in rows] == [
        (rate, queue) for rate in (175.0, 181.02) for queue in ("shared", "round-robin", "least-loaded")
    ]
    for rate in (175.0, 181.02):
        runs = {r["prefill_queue"]: r for r in rows if r["rate"] == rate}
        # On the queues they describe, the pool's inputs predict the wait: mean and median within 10 %.
        for queue in ("shared", "least-loaded"):
            assert runs[queue]["wait_ratio_of_means"] == pytest.approx(1.0, abs=0.1)
            assert runs[queue]["wait_ratio_median"] == pytest.approx(1.0, abs=0.1)
        # Round-robin ignores the workers' loads: fewer requests wait near the pool's prediction.
        for queue in ("shared", "least-loaded"):
            assert runs["round-robin"]["share_within"] < 0.5 * runs[queue]["share_within"]
