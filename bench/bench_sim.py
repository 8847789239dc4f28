"""Simulator speed: 100,000 requests through ``pdroute simulate``'s engine, with baselines.

    .venv/bin/python -m bench.bench_sim [--requests 100000] [--rate 20] [--profile FILE]
        [--kv-capacity-tokens 400000] [--tight-kv-capacity-tokens 24000]

Workload: Poisson arrivals at ``--rate`` requests/s, log-normal lengths with the Azure 2023
conversation trace's means (1155 prompt, 211 output tokens), seed 0; fleet: 2 prefill + 6
decode GPUs (conditional topology). The profile is ``--profile``, else the packaged default
profile (``solver/data/profiles/default.json``) when present, else a synthetic profile shaped like
Qwen3-8B on one H100 (aiconfigurator figures, rounded; stated in the output).

The log-normal tail reaches past the default profile's measured grid (2,048-token prompts and
contexts), so the runs are allowed to extrapolate (``FleetConfig.allow_extrapolation``); the
count of steps beyond the tables is printed.

Prints, for the cost-model policy: wall time, requests/s and engine steps/s; then baselines
measured in the same run: the same workload under always-collocated (the policy's share of the
cost), the per-step reference loop (one event per engine step, no decode runs) on the first
tenth of the requests (the speed-up of batching decode runs into one event), and the cost of KV
capacity (``solver.sim.kv_pool``): always-collocated on the requests whose context is at most
16,384 tokens (all but 0.1 % of them), with ``--kv-capacity-tokens`` per engine GPU (default
400,000, about what an 80 GB GPU leaves an 8B model: nothing preempted, the bookkeeping's cost)
and ``--tight-kv-capacity-tokens`` (default 24,000: hundreds of preemptions), each over the same
requests with unlimited capacity.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from pdroute_core.routing.design import AnalyticalCostModel
from solver.errors import InvalidSimConfig
from solver.fit import fit_profile
from solver.profile_io import load_profile
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    ClusterSimulation,
    FleetConfig,
    ModelPolicy,
    Policy,
    Workload,
    parse_length_spec,
    poisson_workload,
)
from solver.sim.latency import StepLatency

KV_MAX_CONTEXT = 16_384  # the KV runs keep the requests whose context is at most this
PROFILES_DIR = Path(__file__).resolve().parents[1] / "solver" / "data" / "profiles"


def synthetic_h100_profile() -> ProfileResult:
    """Tables shaped like Qwen3-8B on one H100 SXM (rounded aiconfigurator-style figures)."""
    prefill = {64: 8.6, 128: 8.6, 256: 10.2, 512: 12.9, 1024: 22.7, 2048: 44.5}
    decode = {}
    for kv in (128, 512, 1024, 2048):
        for batch in (1, 4, 8, 16, 32):
            decode[(kv, batch)] = 6.3 + 0.03 * batch + 5.5e-5 * kv * batch
    interference = {(c, b): 0.0148 * c - 0.0004 * c * b / 16 for c in (64, 128, 256, 512) for b in (4, 8, 16)}
    return ProfileResult(
        T_prefill=prefill,
        T_decode=decode,
        T_interference=interference,
        p2p_bandwidth_GBps=450.0,
        bytes_per_token=147456,
        model_config={"name": "synthetic Qwen3-8B-like"},
        device={"name": "synthetic H100-like"},
        transfer_path="nvlink",
    )


def pick_profile(path: Path | None) -> tuple[ProfileResult, str]:
    if path is not None:
        return load_profile(path), str(path)
    packaged = PROFILES_DIR / "default.json"
    if packaged.is_file():
        return load_profile(packaged), str(packaged)
    return synthetic_h100_profile(), "synthetic H100-like profile (no packaged profile found)"


def timed(
    fleet: FleetConfig, latency: StepLatency, policy: Policy, wl: Workload, use_runs: bool
) -> tuple[float, float, int]:
    """Wall seconds and CPU seconds of one run, and its engine steps."""
    sim = ClusterSimulation(fleet, latency, policy, use_runs=use_runs)
    started, cpu_started = time.perf_counter(), time.process_time()
    rec = sim.run(wl, wl.output_len)
    return time.perf_counter() - started, time.process_time() - cpu_started, rec.num_engine_steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s")
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--kv-capacity-tokens", type=int, default=400_000, help="per engine GPU")
    parser.add_argument(
        "--tight-kv-capacity-tokens",
        type=int,
        default=24_000,
        help="per engine GPU, a capacity that preempts",
    )
    args = parser.parse_args(argv)

    profile, where = pick_profile(args.profile)
    params, _report = fit_profile(profile)
    latency = StepLatency(profile)
    fleet = FleetConfig(
        num_prefill=2,
        num_decode=6,
        max_num_batched_tokens=max(latency.max_chunk, 256),
        kv_capacity_tokens=None,
        allow_extrapolation=True,
    )
    wl = poisson_workload(args.requests, args.rate, parse_length_spec("lognormal:1155,211"), seed=0)
    print(f"profile: {where}")
    print(f"workload: {wl.num_requests} requests, {wl.source}; fleet: {fleet.describe()}")

    cost_s, cost_cpu, steps = timed(
        fleet, latency, ModelPolicy(AnalyticalCostModel(params), "cost-model"), wl, True
    )
    print(
        f"cost-model policy:   {cost_s:7.2f} s wall ({cost_cpu:.2f} s CPU)  "
        f"{wl.num_requests / cost_s:9,.0f} requests/s  {steps / cost_s:12,.0f} engine steps/s "
        f"({steps:,} steps)"
    )
    base_s, base_cpu, _ = timed(fleet, latency, AlwaysCollocated(), wl, True)
    print(
        f"always-collocated:   {base_s:7.2f} s wall ({base_cpu:.2f} s CPU)  "
        f"{wl.num_requests / base_s:9,.0f} requests/s"
    )
    print(f"ratio cost-model / always-collocated: {cost_s / base_s:.2f} wall, {cost_cpu / base_cpu:.2f} CPU")

    tenth = wl.head(max(wl.num_requests // 10, 2))
    ref_s, _, _ = timed(fleet, latency, AlwaysCollocated(), tenth, False)
    runs_s, _, _ = timed(fleet, latency, AlwaysCollocated(), tenth, True)
    print(
        f"first {tenth.num_requests} requests, always-collocated: per-step events {ref_s:.2f} s, "
        f"decode runs {runs_s:.2f} s; speed-up {ref_s / runs_s:.1f}x"
    )
    beyond = ClusterSimulation(fleet, latency, AlwaysCollocated()).run(tenth, tenth.output_len).extrapolated
    print(f"steps beyond the profile's tables (first tenth, always-collocated): {dict(beyond)}")

    # KV capacity: the requests whose context fits the tight capacity's GPU (all but the tail).
    fits = wl.prompt_len + wl.output_len <= KV_MAX_CONTEXT
    kv_wl = Workload(wl.arrival_s[fits], wl.prompt_len[fits], wl.output_len[fits], source=wl.source)
    unl_s, unl_cpu, _ = timed(fleet, latency, AlwaysCollocated(), kv_wl, True)
    print(
        f"KV capacity, always-collocated on the {kv_wl.num_requests} requests with contexts up to "
        f"{KV_MAX_CONTEXT:,} tokens: unlimited {unl_s:.2f} s wall ({unl_cpu:.2f} s CPU)"
    )
    for capacity in (args.kv_capacity_tokens, args.tight_kv_capacity_tokens):
        kv_fleet = dataclasses.replace(fleet, kv_capacity_tokens=capacity)
        try:
            kv_s, kv_cpu, _ = timed(kv_fleet, latency, AlwaysCollocated(), kv_wl, True)
        except InvalidSimConfig as exc:
            print(f"  {capacity:,} tokens per GPU: {exc}")
            continue
        rec = ClusterSimulation(kv_fleet, latency, AlwaysCollocated()).run(kv_wl, kv_wl.output_len)
        print(
            f"  {capacity:,} tokens per GPU: {kv_s:.2f} s wall ({kv_cpu:.2f} s CPU), over unlimited "
            f"{kv_s / unl_s:.2f} wall, {kv_cpu / unl_cpu:.2f} CPU; {rec.num_preemptions:,} preemptions, "
            f"{rec.num_recomputed_tokens:,} tokens recomputed"
        )
    verdict = "under" if cost_s < 60 else "OVER"
    print(f"{wl.num_requests} requests in {cost_s:.1f} s: {verdict} the 60 s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
