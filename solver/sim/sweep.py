"""The library API: simulate one policy, or sweep policies over loads and collect metrics.

Example (no HTTP, no files beyond the inputs)::

    from solver.profile_io import load_profile
    from solver.params import load_params
    from pdroute_core.routing.design import AnalyticalCostModel
    from solver.sim import FleetConfig, format_table, make_policy, read_trace, run_sweep

    profile = load_profile("profile.json")
    model = AnalyticalCostModel(load_params("params.json"))
    trace = read_trace("trace.csv")
    policies = make_policies(["collocated", "cost-model", "best-static"], model=model)
    result = run_sweep(profile, [trace.at_rate(r) for r in (2, 4, 8)], policies, FleetConfig())
    print(format_table(result.metrics))

Static rules (``collocated``, ``disaggregated``, ``threshold``, ``threshold-queue`` and the grid
of ``best-static``) share their runs within a load: a rule that would make the same decisions
as an earlier run is not simulated again (``solver.sim.hindsight.StaticRuns``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pdroute_core.routing.design import AnalyticalCostModel
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim.calibrating import LearningPolicy
from solver.sim.events import ClusterSimulation
from solver.sim.fleet import FleetConfig
from solver.sim.hindsight import STATIC_RULES, BestStatic, StaticRuns, best_static_metrics
from solver.sim.latency import StepLatency
from solver.sim.policies import BEST_STATIC, Policy, make_policy
from solver.sim.prediction import OutputPrediction
from solver.sim.records import SimRecords
from solver.sim.report import PolicyMetrics, SloLimits, summarize
from solver.sim.workload import Workload


def simulate(
    profile: ProfileResult | StepLatency,
    workload: Workload,
    policy: Policy,
    fleet: FleetConfig | None = None,
    prediction: OutputPrediction | None = None,
    slo: SloLimits | None = None,
    shed: bool = False,
    allow_extrapolation: bool | None = None,
) -> SimRecords:
    """Run ``policy`` over ``workload`` on ``fleet``; step times from ``profile``'s tables.

    ``slo`` is shown to the policy in every view; ``shed`` drops the requests it answers
    infeasible (``solver.sim.events``); ``allow_extrapolation`` (None: the fleet's setting) runs
    beyond the profile's measured ranges instead of refusing (``solver.sim.extrapolation``)."""
    latency = profile if isinstance(profile, StepLatency) else StepLatency(profile)
    predicted = (prediction or OutputPrediction()).predict(workload)
    fleet = _with_extrapolation(fleet or FleetConfig(), allow_extrapolation)
    sim = ClusterSimulation(fleet, latency, policy, slo=slo, shed=shed)
    return sim.run(workload, predicted)


def _with_extrapolation(fleet: FleetConfig, allow_extrapolation: bool | None) -> FleetConfig:
    if allow_extrapolation is None or allow_extrapolation == fleet.allow_extrapolation:
        return fleet
    return dataclasses.replace(fleet, allow_extrapolation=allow_extrapolation)


SweepEntry = Policy | BestStatic


def make_policies(
    names: Sequence[str],
    *,
    model: AnalyticalCostModel | None = None,
    queue_model: QueueAwareModel | None = None,
    threshold_tokens: int = 1000,
    max_queue_depth: int = 2,
) -> list[SweepEntry]:
    """The sweep entries for ``names``: ``make_policy`` for each, and for ``best-static`` the
    default grid plus ``threshold_tokens`` and ``max_queue_depth``."""
    return [
        BestStatic().including(threshold_tokens, max_queue_depth)
        if name == BEST_STATIC
        else make_policy(
            name,
            model=model,
            queue_model=queue_model,
            threshold_tokens=threshold_tokens,
            max_queue_depth=max_queue_depth,
        )
        for name in names
    ]


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Metrics of every (policy, load), plus each run's end-to-end latencies for CDF plots."""

    metrics: tuple[PolicyMetrics, ...]
    e2e_ms: dict[tuple[str, float], npt.NDArray[np.float64]] = field(repr=False)
    settings: dict[str, Any]  # the inputs, for the JSON file

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(m.policy for m in self.metrics))

    @property
    def rates(self) -> list[float]:
        return sorted({m.offered_rate for m in self.metrics})

    def to_json_dict(self) -> dict[str, Any]:
        """Settings and metrics; non-finite numbers become None so the file is strict JSON."""
        return {
            "settings": strict_json(self.settings),
            "results": [strict_json(m.to_json_dict()) for m in self.metrics],
        }


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (for strict JSON files)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def run_sweep(
    profile: ProfileResult,
    workloads: Sequence[Workload],
    policies: Sequence[SweepEntry],
    fleet: FleetConfig | None = None,
    prediction: OutputPrediction | None = None,
    slo: SloLimits | None = None,
    shed: bool = False,
    allow_extrapolation: bool | None = None,
) -> SweepResult:
    """Simulate every policy on every workload (one per offered load) and summarise.

    The offered rate of a workload is its mean arrival rate; a one-request workload has none
    and is labelled 0. ``BestStatic`` entries run their grid and report the best rule per
    load (``solver.sim.hindsight``). ``shed``: the gateway drops the requests a policy answers
    infeasible (counted as SLO misses).
    """
    if not workloads or not policies:
        raise InvalidSimConfig("a sweep needs at least one workload and one policy")
    fleet = _with_extrapolation(fleet or FleetConfig(), allow_extrapolation)
    prediction = prediction or OutputPrediction()
    slo = slo or SloLimits()
    latency = StepLatency(profile)
    metrics: list[PolicyMetrics] = []
    e2e: dict[tuple[str, float], npt.NDArray[np.float64]] = {}
    num_simulated = 0
    for workload in workloads:
        rate = workload.mean_rate or 0.0
        predicted = prediction.predict(workload)

        def run(
            policy: Policy, workload: Workload = workload, predicted: np.ndarray = predicted
        ) -> SimRecords:
            sim = ClusterSimulation(fleet, latency, policy, slo=slo, shed=shed)
            return sim.run(workload, predicted)

        def score(rec: SimRecords, rate: float = rate) -> PolicyMetrics:
            return summarize(rec, rate, slo)

        static = StaticRuns(run)
        for entry in policies:
            if isinstance(entry, BestStatic):
                m, records = best_static_metrics(entry, static, score)
            elif isinstance(entry, STATIC_RULES):
                records = static.records(entry)
                m = score(records)
            else:
                # A learning policy learns during a run: every load starts it afresh.
                records = run(entry.fresh() if isinstance(entry, LearningPolicy) else entry)
                num_simulated += 1
                m = score(records)
            metrics.append(m)
            e2e[(entry.name, rate)] = records.e2e_ms
        num_simulated += static.num_simulated
    settings = {
        "fleet": {
            "topology": fleet.topology,
            "num_prefill": fleet.num_prefill,
            "num_decode": fleet.num_decode,
            "num_mixed": fleet.num_mixed,
            "max_num_batched_tokens": fleet.max_num_batched_tokens,
            "max_num_seqs": fleet.max_num_seqs,
            "prefill_queue": fleet.prefill_queue_discipline,
            "first_token": fleet.first_token,
            "prefix_cache_tokens": fleet.prefix_cache_capacity(profile.kv_capacity_tokens),
            "decode_choice": fleet.decode_choice,
            "kv_capacity_tokens": fleet.kv_capacity_in_force(profile.kv_capacity_tokens),
            "block_size": fleet.block_size,
            "allow_extrapolation": fleet.allow_extrapolation,
        },
        "prediction": prediction.label,
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "shed": shed,
        "num_runs_simulated": num_simulated,
        "policies": [p.name for p in policies],
        "workloads": [
            {"source": w.source, "num_requests": w.num_requests, "rate": w.mean_rate} for w in workloads
        ],
        "profile": {
            "model": dict(profile.model_config).get("name", dict(profile.model_config).get("model")),
            "device": dict(profile.device),
            "transfer_path": profile.transfer_path,
            "p2p_bandwidth_GBps": profile.p2p_bandwidth_GBps,
            "bytes_per_token": profile.bytes_per_token,
        },
    }
    return SweepResult(tuple(metrics), e2e, settings)
