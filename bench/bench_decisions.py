"""Decision quality: a candidate policy against the static rules, light to overloaded.

    .venv/bin/python -m bench.bench_decisions [--profile default,...] [--topology conditional,pools]
        [--predict exact,mean,bucket-mean] [--candidate queue-aware] [--policies a,b,...]
        [--trace CSV | --lengths SPEC | --sessions SPEC] [--max-requests N] [--loads 4]
        [--top-scale 1] [--shed]
        [--objective latency] [--variants goodput,goodput+shed] [--jobs 1] [--json OUT]

For each profile x topology, the loads are found automatically: the rate is raised (doubling,
then bisection to within 10 %) until always-collocated misses an SLO for at least 20 % of the
requests (``--overload-miss``); that rate is the highest load, and the others are fractions of
it (``--loads`` of them, 0.25 to 1.0 for four). At each load every policy runs on the same
requests; per load it prints each policy's goodput, TTFT p99 and SLO attainment, and for the
candidate: its goodput over the best of the four static rules (collocated, disaggregated,
threshold, threshold-queue) and over ``best-static`` (the grid tuned with hindsight), its TTFT
p99 over that of the best static rule (the one with the best goodput), its goodput over each
static rule that misses an SLO for more than 10 % of requests, and its prediction error.

Profiles: a name of ``solver/data/profiles`` (``default``, ``qwen3-8b_h200_sxm_vllm_nvlink``,
...) or a path. The cost model reads the params file of the same name in
``solver/data/params`` when there is one, else fits the profile. Requests: ``--trace`` (the
Azure 2023 conversation trace in ``../shared`` by default); when that file does not exist, a
Poisson load with log-normal lengths of the same means (1,155 prompt, 211 output tokens,
``--max-requests`` of them, default 20,000). ``--lengths SPEC`` (``lognormal:PMEAN,OMEAN[,SIGMA]``,
``uniform:...``, ``fixed:P,O``) runs such a Poisson load with other lengths instead, to check a
model on request shapes the trace does not have. ``--sessions SPEC`` (``solver.sim.sessions``:
``chat|agent[:KEY=VALUE,...]``) runs multi-turn sessions instead, each turn's prompt the
session's context so far plus new tokens, over prefix caches of the profile's KV capacity (the
rules see the decode GPU's hit), replayed on their open schedule (``loop=open``: a closed loop
would pace the sessions by their own answers and cap the load); the loads are its requests'
mean rate. Fleets:
``conditional`` 2 prefill + 6 decode GPUs; ``pools`` 2 mixed + 2 prefill + 4 decode GPUs; chunk
size the profile's largest.

``--top-scale S`` stretches the loads to S times that rate (2: light to twice the overload
point). ``--objective`` is the queue-aware model's (``latency``, as before, or ``goodput``);
``--variants`` adds the queue-aware model under other settings beside it on the same requests,
each ``OBJECTIVE[+shed]`` (``+shed``: the gateway drops what the answer says to shed), shown as
``queue-aware:OBJECTIVE[+shed]`` with the candidate's ratios; ``--shed`` sheds for every policy.

Static rules ignore the output-length prediction, so their runs (and ``best-static``'s grid)
are done once per load and shared by every ``--predict`` mode; rules that would make the same
decisions share one run (``solver.sim.hindsight``). A policy name registered in
``solver.sim.make_policy`` can be passed in ``--policies`` / ``--candidate``. ``--jobs N`` runs
the profile x topology blocks in N processes (same figures as one).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pdroute_core.params import CostModelParams
from pdroute_core.routing.design import AnalyticalCostModel
from pdroute_core.routing.objective import LATENCY, OBJECTIVES, parse_objective
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.errors import InvalidSimConfig, InvalidTrace
from solver.fit import fit_profile
from solver.params import load_params
from solver.profile_io import load_profile
from solver.profile_result import ProfileResult
from solver.sim import (
    BEST_STATIC,
    AlwaysCollocated,
    BestStatic,
    ClusterSimulation,
    FleetConfig,
    ModelPolicy,
    OutputPrediction,
    Policy,
    PolicyMetrics,
    SimRecords,
    SloLimits,
    Workload,
    make_policy,
    parse_length_spec,
    parse_policy_names,
    parse_prediction,
    pick_best,
    poisson_workload,
    read_trace,
    summarize,
)
from solver.sim.hindsight import STATIC_RULES, StaticRuns, best_static_metrics
from solver.sim.latency import StepLatency
from solver.sim.sessions import parse_session_spec, session_workload
from solver.sim.sweep import strict_json

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "azure-llm-trace" / "AzureLLMInferenceTrace_conv.csv"
STATIC_NAMES = ("collocated", "disaggregated", "threshold", "threshold-queue")
DEFAULT_POLICIES = (*STATIC_NAMES, BEST_STATIC, "cost-model", "queue-aware")
FLEETS = {  # (num_mixed, num_prefill, num_decode)
    "conditional": (0, 2, 6),
    "pools": (2, 2, 4),
}
THRESHOLD_TOKENS, MAX_QUEUE_DEPTH = 1000, 2  # the threshold rules as `pdroute simulate` runs them
MISSING_RULE = 0.10  # a static rule missing an SLO for more than this share is "failing"
VARIANT_PREFIX = "queue-aware:"  # the queue-aware model under another objective (--variants)
SHED_SUFFIX = "+shed"


def parse_variant(name: str) -> tuple[str, bool]:
    """``queue-aware:OBJECTIVE[+shed]`` as (objective, shed); ``ValueError`` for a bad one."""
    spec = name.removeprefix(VARIANT_PREFIX)
    shed = spec.endswith(SHED_SUFFIX)
    return parse_objective(spec.removesuffix(SHED_SUFFIX)), shed


def load_requests(
    trace: Path, max_requests: int | None, lengths: str | None = None, sessions: str | None = None
) -> Workload:
    if sessions is not None:
        # The open schedule: a closed loop paces each session by its own answers, which caps the
        # load at the sessions' pace, so no load search could take it past capacity.
        shape = dataclasses.replace(parse_session_spec(sessions), loop="open")
        print(
            f"(multi-turn sessions {sessions}, open loop; prefix caches: the profile's KV capacity)",
            file=sys.stderr,
        )
        wl = session_workload(shape, 1.0, seed=0)
        return wl if max_requests is None else wl.head(max_requests)
    if lengths is not None:
        spec = parse_length_spec(lengths)
        print(f"(Poisson arrivals, lengths {lengths})", file=sys.stderr)
        return poisson_workload(max_requests or 20_000, 1.0, spec, seed=0)
    if trace.is_file():
        base = read_trace(trace)
        return base.head(max_requests) if max_requests else base
    print(f"(no trace at {trace}: Poisson arrivals, log-normal lengths 1155/211)", file=sys.stderr)
    return poisson_workload(max_requests or 20_000, 1.0, parse_length_spec("lognormal:1155,211"), seed=0)


def params_for(name: str, profile: ProfileResult) -> CostModelParams:
    """The shipped params of the same name when they carry both models, else a fit of the profile."""
    path = ROOT / "solver" / "data" / "params" / f"{Path(name).stem}.json"
    if path.is_file():
        params = load_params(path)
        if params.queue_aware is not None:
            return params
    return fit_profile(profile)[0]


class NoOverloadPoint(RuntimeError):
    """The load search found no rate where always-collocated starts missing its targets."""


LOWEST_RATE = 0.05  # requests/s: the load search goes no lower


def find_top_rate(miss_at: Callable[[float], float], target: float, start: float = 5.0) -> float:
    """The lowest rate (within 10 %) where ``miss_at(rate) >= target``: double, then bisect.
    ``NoOverloadPoint`` where it misses at no rate up to 1e6 requests/s, or already at
    ``LOWEST_RATE``."""
    low, high = 0.0, start
    while miss_at(high) < target:
        low, high = high, high * 2
        if high > 1e6:
            raise NoOverloadPoint("always-collocated never misses the SLO: the fleet does not saturate")
    while low == 0.0:  # overloaded already at the start: halve down
        if high / 2 < LOWEST_RATE:
            raise NoOverloadPoint(
                f"always-collocated misses the SLO for {target:.0%} of requests already at {high:g}"
                " requests/s: the targets are tighter than this fleet serves (--ttft-slo-ms, --tpot-slo-ms)"
            )
        if miss_at(high / 2) >= target:
            high /= 2
        else:
            low = high / 2
    while high > low * 1.1:
        mid = math.sqrt(low * high)
        if miss_at(mid) >= target:
            high = mid
        else:
            low = mid
    return high


class Bench:
    """One profile x topology: its loads, shared static runs, and per-mode policy runs."""

    def __init__(self, profile_name: str, topology: str, base: Workload, args: argparse.Namespace) -> None:
        path = Path(profile_name)
        if not path.suffix:
            path = ROOT / "solver" / "data" / "profiles" / f"{profile_name}.json"
        self.profile = load_profile(path)
        self.latency = StepLatency(self.profile)
        mixed, prefill, decode = FLEETS[topology]
        self.fleet = FleetConfig(
            topology,
            prefill,
            decode,
            mixed,
            max_num_batched_tokens=max(self.latency.max_chunk, 256),
            allow_extrapolation=args.allow_extrapolation,
            prefill_batch_tokens=args.prefill_batch_tokens,
        )
        params = params_for(profile_name, self.profile)
        self.model = AnalyticalCostModel(params)
        self.queue_model = QueueAwareModel(params, objective=args.objective)
        self.slo = SloLimits(args.ttft_slo_ms, args.tpot_slo_ms)
        self.base = base
        self.shed = args.shed
        self.static: dict[float, tuple[StaticRuns, Workload]] = {}
        self.num_runs = 0

    def _run(
        self, policy: Policy, wl: Workload, prediction: OutputPrediction, shed: bool = False
    ) -> SimRecords:
        self.num_runs += 1
        sim = ClusterSimulation(self.fleet, self.latency, policy, slo=self.slo, shed=self.shed or shed)
        return sim.run(wl, prediction.predict(wl))

    def static_runs(self, rate: float) -> tuple[StaticRuns, Workload]:
        if rate not in self.static:
            wl = self.base.at_rate(rate)
            runs = StaticRuns(lambda p: self._run(p, wl, OutputPrediction()))
            self.static[rate] = (runs, wl)
        return self.static[rate]

    def score(self, rec: SimRecords, rate: float) -> PolicyMetrics:
        return summarize(rec, rate, self.slo)

    def miss_share(self, rate: float) -> float:
        runs, _ = self.static_runs(rate)
        return 1.0 - self.score(runs.records(AlwaysCollocated()), rate).slo_attainment

    def metrics(self, name: str, rate: float, prediction: OutputPrediction) -> PolicyMetrics:
        runs, wl = self.static_runs(rate)
        if name == BEST_STATIC:
            grid = BestStatic().including(THRESHOLD_TOKENS, MAX_QUEUE_DEPTH)
            return best_static_metrics(grid, runs, lambda r: self.score(r, rate))[0]
        if name.startswith(VARIANT_PREFIX):
            objective, shed = parse_variant(name)
            variant = ModelPolicy(self.queue_model.with_objective(objective), name)
            return self.score(self._run(variant, wl, prediction, shed), rate)
        policy = make_policy(
            name,
            model=self.model,
            queue_model=self.queue_model,
            threshold_tokens=THRESHOLD_TOKENS,
            max_queue_depth=MAX_QUEUE_DEPTH,
        )
        if isinstance(policy, STATIC_RULES):
            return self.score(runs.records(policy), rate)
        return self.score(self._run(policy, wl, prediction), rate)


def candidate_summary(by_name: dict[str, PolicyMetrics], candidate: str) -> dict[str, Any]:
    cand = by_name[candidate]
    rules = [(n, by_name[n]) for n in STATIC_NAMES]
    best_name, best_rule = pick_best(rules)

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b

    failing = {
        n: ratio(cand.goodput_rps, m.goodput_rps) for n, m in rules if 1 - m.slo_attainment > MISSING_RULE
    }
    return {
        "best_rule": best_name,
        "goodput_vs_best_rule": ratio(cand.goodput_rps, best_rule.goodput_rps),
        "goodput_vs_best_static": ratio(cand.goodput_rps, by_name[BEST_STATIC].goodput_rps),
        "ttft_p99_vs_best_rule": ratio(cand.ttft_ms.p99, best_rule.ttft_ms.p99),
        "goodput_vs_failing_rules": failing,
        "ttft_err_p50_pct": cand.ttft_error.median_rel_pct if cand.ttft_error else None,
        "e2e_err_p50_pct": cand.e2e_error.median_rel_pct if cand.e2e_error else None,
        "slo_attainment": cand.slo_attainment,
    }


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_load(
    rate: float, rows: dict[str, PolicyMetrics], summary: dict[str, Any], candidate: str
) -> list[str]:
    width = max(len(m.label) for m in rows.values())
    lines = [f"  load {rate:.2f}/s"]
    for m in rows.values():
        lines.append(
            f"    {m.label:<{width}}  good/s {_f(m.goodput_rps):>8}  TTFT p99 {_f(m.ttft_ms.p99, 0):>8} ms"
            f"  SLO {_f(100 * m.slo_attainment, 1):>5} %  shed {_f(100 * m.share_shed, 1):>5} %"
        )
    lines.append(format_summary(summary, candidate))
    return lines


def format_summary(summary: dict[str, Any], candidate: str) -> str:
    """The candidate's ratios at one load, as one line."""
    failing = ", ".join(f"{n} {_f(r)}x" for n, r in summary["goodput_vs_failing_rules"].items()) or "none"
    best = f"{_f(summary['goodput_vs_best_rule'], 3)}x best rule ({summary['best_rule']})"
    return (
        f"    {candidate}: goodput {best},"
        f" {_f(summary['goodput_vs_best_static'], 3)}x best-static; TTFT p99"
        f" {_f(summary['ttft_p99_vs_best_rule'], 2)}x best rule; vs rules missing >10 %: {failing};"
        f" error p50 TTFT {_f(summary['ttft_err_p50_pct'], 1)} %, e2e {_f(summary['e2e_err_p50_pct'], 1)} %"
    )


def run_block(
    profile_name: str,
    topology: str,
    base: Workload,
    args: argparse.Namespace,
    names: list[str],
    predictions: list[OutputPrediction],
) -> tuple[list[str], list[dict[str, Any]]]:
    """One profile x topology, every prediction mode: the printed lines and the JSON blocks."""
    started = time.perf_counter()
    bench = Bench(profile_name, topology, base, args)
    top = find_top_rate(bench.miss_share, args.overload_miss)
    rates = [args.top_scale * top * (k + 1) / args.loads for k in range(args.loads)]
    lines: list[str] = []
    blocks: list[dict[str, Any]] = []
    for prediction in predictions:
        lines.append(
            f"{profile_name} / {bench.fleet.describe()}; {bench.fleet.describe_engines()} / "
            f"predict {prediction.label}; {base.source}"
        )
        loads = []
        for rate in rates:
            rows = {n: bench.metrics(n, rate, prediction) for n in names}
            summary = candidate_summary(rows, args.candidate)
            lines += format_load(rate, rows, summary, args.candidate)
            variants = {n: candidate_summary(rows, n) for n in names if n.startswith(VARIANT_PREFIX)}
            for n, s in variants.items():
                lines.append(format_summary(s, n))
            loads.append(
                {
                    "rate": rate,
                    "candidate": summary,
                    "variants": variants,
                    "policies": [m.to_json_dict() for m in rows.values()],
                }
            )
        blocks.append(
            {"profile": profile_name, "topology": topology, "predict": prediction.label, "loads": loads}
        )
    lines.append(f"  ({bench.num_runs} runs in {time.perf_counter() - started:.1f} s)")
    return lines, blocks


BlockJob = tuple[str, str, Workload, argparse.Namespace, list[str], list[OutputPrediction]]


def _results(jobs: list[BlockJob], num_jobs: int) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
    """``run_block`` of each job, in order; in ``num_jobs`` processes when more than one."""
    if num_jobs == 1:
        for job in jobs:
            yield run_block(*job)
        return
    with ProcessPoolExecutor(max_workers=num_jobs) as pool:
        yield from pool.map(run_block, *zip(*jobs, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", default="default", help="comma list of profile names or paths")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument(
        "--lengths",
        help="Poisson arrivals with these lengths instead of the trace (e.g. lognormal:2048,28)",
    )
    parser.add_argument(
        "--sessions",
        help="multi-turn sessions instead of the trace (solver.sim.sessions: chat|agent[:KEY=VALUE,...]);"
        " the loads are the requests' mean rate",
    )
    parser.add_argument("--topology", default="conditional", help="comma list: conditional, pools")
    parser.add_argument("--predict", default="exact", help="comma list: exact, mean, bucket-mean, fixed:N")
    parser.add_argument("--candidate", default="queue-aware", help="the policy compared with the rules")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="policies to run")
    parser.add_argument("--max-requests", type=int, help="use the first N requests (Poisson: N requests)")
    parser.add_argument("--loads", type=int, default=4, help="loads per profile and topology (>= 2)")
    parser.add_argument("--overload-miss", type=float, default=0.2, help="collocated's miss share at the top")
    parser.add_argument("--ttft-slo-ms", type=float, default=1000.0)
    parser.add_argument("--tpot-slo-ms", type=float, default=50.0)
    parser.add_argument("--top-scale", type=float, default=1.0, help="the highest load over the top rate")
    parser.add_argument("--shed", action="store_true", help="drop requests a policy answers to shed")
    parser.add_argument(
        "--prefill-batch-tokens",
        type=int,
        default=0,
        help="a prefill GPU's token budget per pass: the waiting prompts that fit share it, as on "
        "vLLM (0: one prompt a pass)",
    )
    parser.add_argument(
        "--objective", default=LATENCY, choices=OBJECTIVES, help="the queue-aware model's objective"
    )
    parser.add_argument(
        "--variants", default="", help="comma list of OBJECTIVE[+shed]: the queue-aware model beside it"
    )
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--jobs", type=int, default=1, help="profile x topology blocks run in parallel")
    parser.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="run requests beyond the profile's measured ranges (tables extended linearly, counted)",
    )
    args = parser.parse_args(argv)

    names = list(parse_policy_names(args.policies))
    for spec in filter(None, (s.strip() for s in args.variants.split(","))):
        try:
            parse_variant(VARIANT_PREFIX + spec)
        except ValueError as exc:
            parser.error(f"--variants: {exc}")
        names.append(VARIANT_PREFIX + spec)
    if not (math.isfinite(args.top_scale) and args.top_scale > 0):
        parser.error(f"--top-scale: expected a number > 0, got {args.top_scale}")
    for needed in (*STATIC_NAMES, BEST_STATIC, args.candidate):
        if needed not in names:
            names.append(needed)
    parse_policy_names(args.candidate)  # a clear error for an unknown candidate
    predictions = [parse_prediction(p) for p in args.predict.split(",")]
    if args.loads < 2:
        parser.error("--loads: at least 2")
    try:
        base = load_requests(args.trace, args.max_requests, args.lengths, args.sessions)
    except InvalidTrace as exc:
        parser.error(f"--{'sessions' if args.sessions else 'lengths'}: {exc}")
    pairs = [(p, t) for p in args.profile.split(",") for t in args.topology.split(",")]
    for _, topology in pairs:
        if topology not in FLEETS:
            parser.error(f"--topology: unknown {topology!r}")
    if args.jobs < 1:
        parser.error("--jobs: at least 1")
    started = time.perf_counter()
    blocks: list[dict[str, Any]] = []
    jobs = [(p, t, base, args, names, predictions) for p, t in pairs]
    try:
        for lines, done in _results(jobs, args.jobs):
            print("\n".join(lines), flush=True)
            blocks += done
    except (InvalidSimConfig, NoOverloadPoint) as exc:  # beyond the profile's ranges, or no load to run
        print(f"bench_decisions: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - started
    print(f"total {wall:.1f} s wall")
    if args.json:
        document = {"arguments": {k: str(v) for k, v in vars(args).items()}, "wall_s": wall, "blocks": blocks}
        args.json.write_text(json.dumps(strict_json(document), indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
