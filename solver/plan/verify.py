"""A plan checked by the simulator: the recommended fleet, run on the profile it was derived from.

The recommendation (``solver.plan.recommend``) becomes a simulated fleet in the ``pools``
topology (``solver.sim.fleet``): a split runs ``prefill_machines`` prefill GPUs and
``decode_machines`` decode GPUs with every request disaggregated; co-location runs every machine
as a mixed GPU (chunked prefill between its decodes) with every request collocated. Decode GPUs
may run as many requests as the plan's decode batch (``max_num_seqs``). A simulated GPU is the
profiled machine: its step times are the profile's tables.

Two runs of Poisson arrivals with the workload's fixed lengths:

* at the plan's rate: the SLO attainment, goodput and latency an operator would see there;
* at ``OVERLOAD`` x the plan's rate: the fleet saturated, so its throughput is the capacity the
  simulator finds, compared with the plan's rate.

Throughput is counted in steady state: the requests finishing between the first and the third
quartile of the finish times, over that time. The simulator's own ``throughput_rps`` divides by
the whole makespan, which includes filling the fleet and draining the last decodes.

Where the two disagree by more than ``TOLERANCE``, ``likely_cause`` names the plan's assumption
most likely at fault (see ``likely_cause``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from solver.plan.plan import Plan
from solver.plan.recommend import Recommendation, recommend
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    FleetConfig,
    PolicyMetrics,
    SloLimits,
    parse_length_spec,
    poisson_workload,
    simulate,
    summarize,
)
from solver.sim.records import SimRecords

OVERLOAD = 1.5  # offered load of the capacity run, relative to the plan's rate
TOLERANCE = 0.10  # plan and simulation agree when within 10 %


@dataclass(frozen=True)
class Verification:
    """What the simulator measured for a plan's recommendation (rates in requests/s)."""

    fleet: str  # the simulated fleet, described
    predicted_rate_rps: float  # the recommendation's rate
    slo: SloLimits  # the limits behind slo_attainment and goodput
    at_plan: PolicyMetrics  # Poisson arrivals at the plan's rate: SLO attainment, goodput, latency
    served_at_plan_rps: float  # steady-state throughput at the plan's rate
    capacity_rps: float  # steady-state throughput at OVERLOAD x the plan's rate
    capacity_ratio: float  # capacity_rps / predicted_rate_rps
    likely_cause: str | None  # None when they agree within TOLERANCE


def steady_throughput_rps(records: SimRecords) -> float:
    """Requests finishing between the first and third quartile of the finish times, per second."""
    finish = np.sort(records.finish_ms[np.isfinite(records.finish_ms) & ~records.is_shed])
    first, third = len(finish) // 4, (3 * len(finish)) // 4
    span_s = (finish[third] - finish[first]) / 1000.0 if len(finish) >= 4 else 0.0
    return (third - first) / span_s if span_s > 0 else float("nan")


def _fleet(plan: Plan, rec: Recommendation) -> FleetConfig:
    max_seqs = max(1, math.ceil(rec.decode_batch))
    if rec.action == "co-located":
        return FleetConfig(
            topology="pools", num_prefill=0, num_decode=0, num_mixed=plan.machines, max_num_seqs=max_seqs
        )
    return FleetConfig(
        topology="pools",
        num_prefill=rec.prefill_machines,
        num_decode=rec.decode_machines,
        num_mixed=0,
        max_num_seqs=max_seqs,
    )


def likely_cause(plan: Plan, rec: Recommendation, profile: ProfileResult, ratio: float) -> str | None:
    """The plan's assumption most likely behind a capacity ``ratio`` outside 1 +- TOLERANCE."""
    if abs(ratio - 1.0) <= TOLERANCE:
        return None
    if rec.action == "co-located":
        return (
            "co-location: the plan time-shares each machine between whole prefill batches and decode "
            "(flow balance), the simulator mixes chunked prefill into every decode step, "
            f"{'overlapping' if ratio > 1.0 else 'slowing'} them"
        )
    prompt_len = plan.prompt_len
    one_prompt = prompt_len / (_prefill_ms(profile, prompt_len) / 1000.0)  # tokens/s, one per forward
    planned = rec.rate_rps * prompt_len / rec.prefill_machines  # tokens/s per prefill machine
    if ratio < 1.0 and one_prompt < planned * (1.0 - TOLERANCE):
        return (
            f"prefill batching: the plan prefills {rec.prefill_batch_tokens:.6g} tokens per forward at "
            f"{planned:.6g} tokens/s per machine, the simulator one prompt per forward "
            f"({one_prompt:.6g} tokens/s at {prompt_len} tokens)"
        )
    if ratio < 1.0:
        return (
            f"decode batch: the plan runs {rec.decode_batch:.4g} requests per decode machine at the mean "
            "context; the simulator's batches form from arrivals and grow to each request's full context"
        )
    return "the plan's throughput curves are pessimistic here (clamped beyond the measured batches)"


def _prefill_ms(profile: ProfileResult, prompt_len: int) -> float:
    """One prefill forward of ``prompt_len`` tokens (ms), interpolated in the profile's table."""
    lens = sorted(profile.T_prefill)
    if prompt_len <= lens[0]:
        return profile.T_prefill[lens[0]] * prompt_len / lens[0]
    for lo, hi in itertools.pairwise(lens):
        if prompt_len <= hi:
            t_lo, t_hi = profile.T_prefill[lo], profile.T_prefill[hi]
            return t_lo + (t_hi - t_lo) * (prompt_len - lo) / (hi - lo)
    return profile.T_prefill[lens[-1]] * prompt_len / lens[-1]


def verify_plan(
    plan: Plan,
    profile: ProfileResult,
    *,
    num_requests: int = 4000,
    seed: int = 0,
    slo: SloLimits | None = None,
    allow_extrapolation: bool = False,
) -> Verification:
    """Simulate ``plan``'s recommendation on ``profile`` (see the module docstring).
    ``allow_extrapolation``: simulate even beyond the profile's measured ranges (otherwise such
    a plan is refused, ``solver.sim.extrapolation``)."""
    rec = recommend(plan)
    fleet = dataclasses.replace(_fleet(plan, rec), allow_extrapolation=allow_extrapolation)
    policy = AlwaysCollocated() if rec.action == "co-located" else AlwaysDisaggregated()
    lengths = parse_length_spec(f"fixed:{plan.prompt_len},{plan.output_len}")
    limits = slo or SloLimits()
    at_plan = simulate(profile, poisson_workload(num_requests, rec.rate_rps, lengths, seed), policy, fleet)
    overload = OVERLOAD * rec.rate_rps
    saturated = simulate(profile, poisson_workload(num_requests, overload, lengths, seed), policy, fleet)
    capacity = steady_throughput_rps(saturated)
    ratio = capacity / rec.rate_rps
    return Verification(
        fleet=fleet.describe(),
        predicted_rate_rps=rec.rate_rps,
        slo=limits,
        at_plan=summarize(at_plan, rec.rate_rps, limits),
        served_at_plan_rps=steady_throughput_rps(at_plan),
        capacity_rps=capacity,
        capacity_ratio=ratio,
        likely_cause=likely_cause(plan, rec, profile, ratio),
    )


def verification_to_dict(v: Verification) -> dict[str, Any]:
    """The JSON form of ``v`` (plain values)."""
    at_plan = v.at_plan
    return {
        "fleet": v.fleet,
        "predicted_rate_rps": v.predicted_rate_rps,
        "served_at_plan_rps": v.served_at_plan_rps,
        "slo": {"ttft_ms": v.slo.ttft_ms, "tpot_ms": v.slo.tpot_ms},
        "slo_attainment": at_plan.slo_attainment,
        "goodput_rps": at_plan.goodput_rps,
        "ttft_ms": {"p50": at_plan.ttft_ms.p50, "p99": at_plan.ttft_ms.p99},
        "tpot_ms": {"p50": at_plan.tpot_ms.p50, "p99": at_plan.tpot_ms.p99},
        "capacity_rps": v.capacity_rps,
        "capacity_ratio": v.capacity_ratio,
        "likely_cause": v.likely_cause,
        "num_requests": at_plan.num_requests,
    }


def format_verification(v: Verification) -> str:
    """Lines for the command line: what the simulator measured beside what the plan predicted."""
    m = v.at_plan
    lines = [
        f"verify ({v.fleet}; {m.num_requests} Poisson requests per run): at the plan's "
        f"{v.predicted_rate_rps:.5g} req/s the fleet serves {v.served_at_plan_rps:.5g} req/s, "
        f"SLO attainment {m.slo_attainment:.1%} "
        f"(TTFT <= {v.slo.ttft_ms:g} ms, TPOT <= {v.slo.tpot_ms:g} ms), "
        f"goodput {m.goodput_rps:.5g} req/s over the makespan, "
        f"TTFT p50/p99 {m.ttft_ms.p50:.4g}/{m.ttft_ms.p99:.4g} ms",
        f"verify: capacity at {OVERLOAD:g}x the plan's rate {v.capacity_rps:.5g} req/s, "
        f"{v.capacity_ratio:.3f}x the plan's prediction "
        + ("(agrees within 10%)" if v.likely_cause is None else "(differs by more than 10%)"),
    ]
    if v.likely_cause is not None:
        lines.append(f"verify: likely cause: {v.likely_cause}")
    return "\n".join(lines)
