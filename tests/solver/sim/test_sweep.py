"""The library sweep: every policy at every load, summarised, as strict JSON."""

from __future__ import annotations

import json

import pytest

from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim import AlwaysCollocated, SweepResult, run_sweep


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
