"""The library sweep: every policy at every load, summarised, as strict JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdroute_core.routing.types import COLLOCATED
from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    PolicyAnswer,
    RouteView,
    SweepResult,
    parse_length_spec,
    poisson_workload,
    run_sweep,
)
from tests.solver.sim.profiles import linear_fleet


def test_sweep_covers_every_policy_and_load(sweep: SweepResult) -> None:
    assert sweep.policies == ["collocated", "threshold"]
    assert sweep.rates == pytest.approx([2.0, 8.0, 20.0])
    assert len(sweep.metrics) == 6
    # More load, more latency (same requests, compressed in time).
    p50 = [m.e2e_ms.p50 or 0.0 for m in sweep.metrics if m.policy == "collocated"]
    assert p50 == sorted(p50) and 0.0 < p50[0] < p50[-1]
    doc = json.loads(json.dumps(sweep.to_json_dict(), allow_nan=False))
    assert doc["settings"]["prediction"] == "mean"
    assert {r["policy"] for r in doc["results"]} == {"collocated", "threshold"}
    assert len(sweep.e2e_ms[("threshold", sweep.rates[1])]) == 400


def test_sweep_needs_inputs(profile: ProfileResult) -> None:
    with pytest.raises(InvalidSimConfig):
        run_sweep(profile, [], [AlwaysCollocated()])


class ShedsLongPrompts:
    """Predicts a flat 100 ms TTFT and answers infeasible for prompts over 1,000 tokens."""

    name = "sheds-long"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return PolicyAnswer(COLLOCATED, 100.0, None, is_infeasible=view.prompt_len > 1000)


def test_sweep_with_shedding(profile: ProfileResult) -> None:
    wl = poisson_workload(300, 6.0, parse_length_spec("lognormal:900,40"), seed=1)
    share_long = float(np.mean(wl.prompt_len > 1000))
    fleet = linear_fleet(num_prefill=1, num_decode=2)
    runs = {
        shed: run_sweep(profile, [wl], [ShedsLongPrompts(), AlwaysCollocated()], fleet, shed=shed)
        for shed in (False, True)
    }
    kept, shed = (runs[s].metrics[0] for s in (False, True))
    assert runs[True].settings["shed"] is True and runs[False].settings["shed"] is False
    assert kept.share_shed == 0.0 and kept.share_infeasible == pytest.approx(share_long)
    assert shed.share_shed == pytest.approx(share_long) and shed.slo_attainment <= 1 - share_long
    assert shed.ttft_error is not None and shed.ttft_error.num_predicted == round(300 * (1 - share_long))
    assert shed.e2e_error is None  # it predicts no end-to-end latency
    assert runs[True].metrics[1].share_shed == 0.0  # a rule in the same sweep never sheds
    doc = json.loads(json.dumps(runs[True].to_json_dict(), allow_nan=False))
    assert doc["results"][0]["share_shed"] == pytest.approx(share_long)
