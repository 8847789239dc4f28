"""The plan checked by the simulator (solver/plan/verify.py) on the shipped default profile."""

from __future__ import annotations

import pytest

from solver.plan import curve_set_from_profile, fit_curves, load_builtin_profile, recommend, solve_plan
from solver.plan.plan import Plan
from solver.plan.verify import (
    OVERLOAD,
    TOLERANCE,
    format_verification,
    likely_cause,
    verification_to_dict,
    verify_plan,
)

PROFILE = "default"


def _plan(machines: int, prompt_len: int, output_len: int) -> Plan:
    curves = curve_set_from_profile(load_builtin_profile(PROFILE), prompt_len, output_len)
    return solve_plan(fit_curves(curves), machines, prompt_len, output_len)


def test_a_recommended_split_is_served_at_its_planned_rate() -> None:
    plan = _plan(16, 2048, 100)  # a CUF split: 12 prefill and 4 decode GPUs
    rec = recommend(plan)
    assert rec.action == "split"
    # Contexts of 2,147 tokens: past the profile's 2,048-token decode grid, so allowed explicitly.
    v = verify_plan(plan, load_builtin_profile(PROFILE), num_requests=2000, allow_extrapolation=True)
    assert v.fleet == f"pools: 0 mixed + {rec.prefill_machines} prefill + {rec.decode_machines} decode GPUs"
    assert v.at_plan.share_disaggregated == 1.0 and v.at_plan.num_requests == 2000
    assert v.served_at_plan_rps == pytest.approx(rec.rate_rps, rel=0.05)
    assert v.capacity_ratio == pytest.approx(v.capacity_rps / rec.rate_rps)
    assert abs(v.capacity_ratio - 1.0) <= TOLERANCE and v.likely_cause is None
    text = format_verification(v)
    assert "(agrees within 10%)" in text and "likely cause" not in text
    d = verification_to_dict(v)
    assert d["predicted_rate_rps"] == rec.rate_rps and d["likely_cause"] is None


def test_co_location_is_simulated_with_mixed_gpus_and_a_gap_is_explained() -> None:
    plan = _plan(16, 256, 1600)  # no split beats co-location here (short prompts, long outputs)
    assert recommend(plan).action == "co-located"
    v = verify_plan(plan, load_builtin_profile(PROFILE), num_requests=2000)
    assert v.fleet == "pools: 16 mixed + 0 prefill + 0 decode GPUs"
    assert v.at_plan.share_disaggregated == 0.0
    # the simulator overlaps chunked prefill with decode: more capacity than flow balance gives
    assert v.capacity_ratio > 1.0 + TOLERANCE
    assert v.likely_cause is not None and v.likely_cause.startswith("co-location")
    assert f"capacity at {OVERLOAD:g}x the plan's rate" in format_verification(v)


@pytest.mark.parametrize(("ratio", "start"), [(0.5, "decode batch"), (1.5, "the plan's throughput curves")])
def test_a_split_that_disagrees_names_a_cause(ratio: float, start: str) -> None:
    plan = _plan(16, 2048, 100)
    cause = likely_cause(plan, recommend(plan), load_builtin_profile(PROFILE), ratio)
    assert cause is not None and cause.startswith(start)
    assert likely_cause(plan, recommend(plan), load_builtin_profile(PROFILE), 1.0 + TOLERANCE / 2) is None
