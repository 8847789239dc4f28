"""``pdroute simulate``: score routing policies on a trace or a generated load, from a profile.

Example::

    pdroute simulate --profile profile.json --params params.json --trace trace.csv \\
        --policies all --rates 1,2,4,8 -o results/
    pdroute simulate --poisson 2000 --rates 4,8     # the embedded profile and params
    pdroute simulate --sessions chat:turns=8,think_s=20 --rates 0.5,1 \
        --prefix-cache-tokens 200000 -o results/     # conversations over prefix caches

Without ``--profile`` the step times come from the embedded default profile (the one the
embedded params are fitted from), as ``pdroute serve`` decides on the embedded params.

A workload or fleet that would read the profile's tables beyond their measured ranges is
refused with a one-line error naming the range and the value (``solver.sim.extrapolation``);
``--allow-extrapolation`` runs it anyway, extending the tables linearly, and counts the passes
that did per table. ``--kv-capacity-tokens`` bounds each engine GPU's KV cache (vLLM's block
allocation and recompute preemption, ``solver.sim.kv_pool``).

Writes ``results.json`` (settings and every metric), ``results.md`` (the table in Markdown),
``latency_vs_load.png`` and ``e2e_cdf.png`` into the output folder and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from app.cli.usage import UsageError


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="score routing policies in a P/D cluster simulation",
        description="Simulate a fleet of prefill/decode GPUs (step times from a profile's measured "
        "tables) and compare routing policies on a trace or a Poisson load.",
    )
    src = p.add_argument_group("inputs")
    src.add_argument(
        "--profile",
        type=Path,
        help="profile JSON (or .pt) with the tables (default: the embedded default profile, "
        "solver/data/profiles/default.json, the one the embedded params are fitted from)",
    )
    src.add_argument(
        "--params",
        type=Path,
        help="params.json for the cost-model and queue-aware policies (default: embedded)",
    )
    load = src.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--trace",
        type=Path,
        help="trace CSV (Azure format or timestamp_s,prompt,output), or .jsonl with hash ids (Mooncake "
        "form: timestamp ms, input_length, output_length, hash_ids) for prefix caches",
    )
    load.add_argument("--poisson", type=int, metavar="N", help="generate N Poisson arrivals instead")
    load.add_argument(
        "--sessions",
        metavar="SPEC",
        help="generate multi-turn sessions with block hashes: chat|agent[:KEY=VALUE,...], keys sessions, "
        "turns, think_s, first, new, output, system_share, system_len, systems, max_context, sigma, "
        "reply_s_per_token (docs/simulation.md); --rates are then sessions/s",
    )
    src.add_argument(
        "--lengths",
        default="lognormal:1024,128",
        help="Poisson lengths: fixed:P,O | uniform:PMIN-PMAX,OMIN-OMAX | lognormal:PMEAN,OMEAN[,SIGMA] "
        "| empirical:TRACE.csv (default %(default)s)",
    )
    src.add_argument("--max-requests", type=int, help="use only the first N requests of the trace")
    src.add_argument(
        "--trace-block-size",
        type=int,
        default=512,
        help="tokens per hash id of a .jsonl trace (default %(default)s, the Mooncake traces')",
    )
    src.add_argument("--seed", type=int, default=0, help="generator seed (default %(default)s)")
    sweep = p.add_argument_group("loads and policies")
    sweep.add_argument("--rates", help="offered loads in requests/s, comma-separated (trace: rescaled)")
    sweep.add_argument("--scales", help="trace replay speed factors, comma-separated (instead of --rates)")
    sweep.add_argument(
        "--policies",
        default="all",
        help="all (default), or a comma list of: collocated, disaggregated, threshold, "
        "threshold-queue, cost-model, queue-aware, queue-aware+len (queue-aware on the output "
        "length corrected online per prompt bucket), best-static (the best static rule of a grid, per load)",
    )
    sweep.add_argument("--threshold", type=int, default=1000, help="prompt tokens for the threshold rules")
    sweep.add_argument("--max-prefill-queue", type=int, default=2, help="threshold-queue: queue depth limit")
    sweep.add_argument(
        "--harm-weight", type=float, default=0.0, help="queue-aware: weight of the harm to others (default 0)"
    )
    sweep.add_argument(
        "--slo-margin", type=float, default=0.1, help="queue-aware: margin below the targets (default 0.1)"
    )
    sweep.add_argument(
        "--objective",
        default="latency",
        help="queue-aware: what to optimise when no path meets the targets (default latency: the figures "
        "of docs/simulation.md; the service's default is goodput)",
    )
    sweep.add_argument(
        "--calibrate",
        action="store_true",
        help="also run queue-aware+cal: queue-aware recalibrated online from every finished "
        "request's latencies (docs/calibration.md)",
    )
    sweep.add_argument(
        "--calibrate-refresh",
        type=int,
        default=50,
        help="--calibrate: observations between swaps of the calibrated model (default 50)",
    )
    sweep.add_argument(
        "--predict", default="exact", help="output-length prediction: exact | mean | bucket-mean | fixed:N"
    )
    sweep.add_argument(
        "--shed",
        action="store_true",
        help="the gateway drops a request its policy answers infeasible (no path meets the SLO): "
        "counted as an SLO miss, out of the served latencies",
    )
    fleet = p.add_argument_group("fleet")
    fleet.add_argument("--topology", default="conditional", choices=("conditional", "pools"))
    fleet.add_argument("--prefill-gpus", type=int, default=2)
    fleet.add_argument("--decode-gpus", type=int, default=6)
    fleet.add_argument("--mixed-gpus", type=int, default=0, help="pools topology only")
    fleet.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="engine step token budget shared by decode and prefill tokens, as vLLM's "
        "(default: the largest profiled chunk, at least --max-num-seqs)",
    )
    fleet.add_argument(
        "--chunk-size",
        type=int,
        help="the same budget under its older name (vLLM's chunked-prefill size is "
        "max_num_batched_tokens; decodes now take their tokens from it)",
    )
    fleet.add_argument("--max-num-seqs", type=int, default=256, help="running requests per engine GPU")
    fleet.add_argument(
        "--prefix-cache-tokens",
        default="profile",
        metavar="N|profile|none",
        help="prefix-cache capacity per GPU in tokens, for workloads with block hashes (--sessions): "
        "N, profile (its kv_capacity_tokens; none when it has none; the default) or none",
    )
    fleet.add_argument(
        "--decode-choice",
        default="least-loaded",
        choices=("least-loaded", "prefix-affinity"),
        help="how the gateway picks the decode GPU (default %(default)s; prefix-affinity: the fewest "
        "uncached prompt tokens plus queued prefill and decode KV, as Dynamo's KV router)",
    )
    fleet.add_argument(
        "--prefill-queue",
        choices=("shared", "round-robin", "least-loaded"),
        help="prefill pool queueing (default: round-robin for conditional, least-loaded for pools)",
    )
    fleet.add_argument(
        "--prefill-batch-tokens",
        type=int,
        default=0,
        metavar="N",
        help="a prefill GPU's token budget per pass: the waiting prompts that fit go in one pass, "
        "as vLLM runs a prefill engine without chunked prefill (default 0: one prompt a pass)",
    )
    fleet.add_argument(
        "--first-token",
        default="decode-engine",
        choices=("decode-engine", "prefill-engine"),
        help="where a disaggregated request's first token is read (default %(default)s; "
        "prefill-engine: a proxy streaming the prefill engine's token)",
    )
    fleet.add_argument(
        "--kv-capacity-tokens",
        default="profile",
        metavar="N|profile|none",
        help="KV-cache tokens per engine GPU: N, profile (the profile's kv_capacity_tokens, no limit "
        "when it has none; the default) or none (no limit)",
    )
    fleet.add_argument("--block-size", type=int, default=16, help="KV tokens per block (vLLM's default 16)")
    fleet.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="run even when requests or the fleet reach beyond the profile's measured ranges "
        "(the tables extended linearly; the passes that did are counted per table)",
    )
    out = p.add_argument_group("metrics and output")
    out.add_argument("--ttft-slo-ms", type=float, default=1000.0, help="goodput TTFT limit")
    out.add_argument("--tpot-slo-ms", type=float, default=50.0, help="goodput TPOT limit")
    out.add_argument("-o", "--output", type=Path, required=True, help="folder for results and plots")
    out.add_argument("--cdf-rate", type=float, help="load of the CDF plot (default: the middle one)")
    out.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.set_defaults(func=run)


def _numbers(text: str, flag: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise UsageError(f"{flag}: expected numbers > 0, got {text!r}")
    return values


def _tokens_or_profile(text: str, flag: str, minimum: int) -> int | str | None:
    """``--kv-capacity-tokens`` / ``--prefix-cache-tokens``: N >= ``minimum`` tokens, ``profile``
    (the profile's ``kv_capacity_tokens``) or ``none``."""
    value = text.strip().lower()
    if value in ("profile", "none"):
        return None if value == "none" else "profile"
    try:
        tokens = int(value.replace(",", "").replace("_", ""))
    except ValueError:
        raise UsageError(f"{flag}: expected N, profile or none, got {text!r}") from None
    if tokens < minimum:
        raise UsageError(f"{flag}: expected a number of tokens >= {minimum}, got {text!r}")
    return tokens


def run(args: argparse.Namespace) -> int:
    from pdroute_core.routing.design import AnalyticalCostModel
    from pdroute_core.routing.queue_aware import QueueAwareModel
    from solver.params import load_params
    from solver.plan.profile_curves import load_builtin_profile
    from solver.profile_io import load_profile
    from solver.sim import (
        FleetConfig,
        LengthDistribution,
        SloLimits,
        format_markdown,
        format_table,
        make_policies,
        parse_length_spec,
        parse_policy_names,
        parse_prediction,
        poisson_workload,
        read_trace,
        run_sweep,
    )
    from solver.sim.events import check_run
    from solver.sim.latency import StepLatency
    from solver.sim.report import format_extrapolation, format_preemptions

    if args.cdf_rate is not None and not (math.isfinite(args.cdf_rate) and args.cdf_rate > 0):
        raise UsageError(f"--cdf-rate: expected a load > 0 requests/s, got {args.cdf_rate!r}")
    names = parse_policy_names(args.policies)
    prediction = parse_prediction(args.predict)
    slo = SloLimits(args.ttft_slo_ms, args.tpot_slo_ms)
    model = queue_model = None
    notes: list[str] = []
    if args.profile is not None:
        profile = load_profile(args.profile)
    else:
        profile = load_builtin_profile("default")
        notes.append("profile: the embedded default profile (solver/data/profiles/default.json)")
    if args.calibrate and "queue-aware" not in names:
        names = (*names, "queue-aware")
    if args.calibrate_refresh < 1:
        raise UsageError(f"--calibrate-refresh: expected an integer >= 1, got {args.calibrate_refresh}")
    needs_queue_model = "queue-aware" in names or "queue-aware+len" in names
    if "cost-model" in names or needs_queue_model:
        from app.settings import embedded_params_path

        params = load_params(args.params or embedded_params_path())
        model = AnalyticalCostModel(params)
        if needs_queue_model:
            if params.queue_aware is None:
                # A version-1 params file: the queue-aware forms come from the profile itself.
                from solver.fit_queue import fit_queue_aware

                forms, _fits = fit_queue_aware(
                    profile.T_prefill, profile.T_decode, profile.T_interference, profile.T_chunk_prefix
                )
                params = dataclasses.replace(params, queue_aware=forms)
                notes.append("queue-aware: the params have no queue-aware forms; fitted them from --profile")
            if not (math.isfinite(args.harm_weight) and args.harm_weight >= 0):
                raise UsageError(f"--harm-weight: expected a number >= 0, got {args.harm_weight}")
            if not 0 <= args.slo_margin < 1:
                raise UsageError(f"--slo-margin: expected a number in [0, 1), got {args.slo_margin}")
            if args.objective not in ("latency", "goodput"):
                raise UsageError(f"--objective: expected latency or goodput, got {args.objective!r}")
            queue_model = QueueAwareModel(  # predicting the first token the simulated clients read
                params,
                harm_weight=args.harm_weight,
                slo_margin=args.slo_margin,
                objective=args.objective,
                first_token=args.first_token,
            )
    if args.chunk_size is not None and args.max_num_batched_tokens is not None:
        raise UsageError("give --max-num-batched-tokens or --chunk-size (its older name), not both")
    budget = args.max_num_batched_tokens if args.max_num_batched_tokens is not None else args.chunk_size
    if args.chunk_size is not None:
        notes.append(
            f"--chunk-size {args.chunk_size}: read as --max-num-batched-tokens (the step's token budget, "
            "decode tokens included)"
        )
    if budget is None:
        budget = max(StepLatency(profile).max_chunk, args.max_num_seqs)
    cache_tokens = _tokens_or_profile(args.prefix_cache_tokens, "--prefix-cache-tokens", 0)
    fleet = FleetConfig(
        topology=args.topology,
        num_prefill=args.prefill_gpus,
        num_decode=args.decode_gpus,
        num_mixed=args.mixed_gpus,
        max_num_batched_tokens=budget,
        max_num_seqs=args.max_num_seqs,
        prefill_queue=args.prefill_queue,
        first_token=args.first_token,
        prefix_cache_tokens=cache_tokens,
        decode_choice=args.decode_choice,
        kv_capacity_tokens=_tokens_or_profile(args.kv_capacity_tokens, "--kv-capacity-tokens", 1),
        block_size=args.block_size,
        allow_extrapolation=args.allow_extrapolation,
        prefill_batch_tokens=args.prefill_batch_tokens,
    )
    kv_capacity = fleet.kv_capacity_in_force(profile.kv_capacity_tokens)
    if kv_capacity is not None:
        notes.append(f"KV capacity: {kv_capacity:,} tokens per engine GPU in blocks of {fleet.block_size}")
    if args.sessions is not None:
        from solver.sim.sessions import parse_session_spec, session_workload

        shape = parse_session_spec(args.sessions)
        if args.rates is None or args.scales is not None:
            raise UsageError("--sessions needs --rates (sessions per second), not --scales")
        workloads = [session_workload(shape, r, seed=args.seed) for r in _numbers(args.rates, "--rates")]
        if args.max_requests is not None:
            workloads = [w.head(args.max_requests) for w in workloads]
        base = workloads[0]
        notes.append(
            "--sessions: --rates are sessions/s; the table's rate/s is the requests' nominal rate (the open "
            "schedule; in a closed loop thr/s is what arrived)"
        )
    elif args.trace is not None and args.trace.suffix == ".jsonl":
        from solver.sim.hashed_trace import read_hashed_trace

        base = read_hashed_trace(args.trace, args.trace_block_size)
    elif args.trace is not None:
        base = read_trace(args.trace)
    else:
        if args.lengths.startswith("empirical:"):
            source = read_trace(Path(args.lengths.partition(":")[2]))
            pairs = tuple(zip(source.prompt_len.tolist(), source.output_len.tolist(), strict=True))
            lengths = LengthDistribution("empirical", pairs=pairs)
        else:
            lengths = parse_length_spec(args.lengths)
        if args.rates is None:
            raise UsageError("--poisson needs --rates")
        base = poisson_workload(args.poisson, 1.0, lengths, seed=args.seed)
    if args.sessions is not None:
        pass  # one generated workload per rate, above
    else:
        if args.max_requests is not None:
            base = base.head(args.max_requests)
        if args.rates is not None and args.scales is not None:
            raise UsageError("give --rates or --scales, not both")
        if args.rates is not None:
            workloads = [base.at_rate(r) for r in _numbers(args.rates, "--rates")]
        elif args.scales is not None:
            workloads = [base.scaled(s) for s in _numbers(args.scales, "--scales")]
        else:
            workloads = [base]
    capacity = fleet.prefix_cache_capacity(profile.kv_capacity_tokens)
    if base.blocks is None:
        if isinstance(cache_tokens, int):
            notes.append("--prefix-cache-tokens: the workload has no block hashes, so nothing is reused")
    else:
        notes.append(
            "prefix caches: none (--prefix-cache-tokens, or the profile has no kv_capacity_tokens)"
            if capacity is None
            else f"prefix caches: {capacity:,} tokens per GPU, decode GPU by {fleet.decode_choice}"
        )
    policies = make_policies(
        names,
        model=model,
        queue_model=queue_model,
        threshold_tokens=args.threshold,
        max_queue_depth=args.max_prefill_queue,
    )
    if args.calibrate and queue_model is not None:
        from solver.sim.calibrating import CalibratingPolicy

        policies.append(CalibratingPolicy(queue_model, refresh_every=args.calibrate_refresh))
    out: Path = args.output
    try:  # before the simulation, so an unusable folder does not waste a long run
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {out}: cannot create the output folder ({exc.strerror})") from None
    for workload in workloads:  # refused here, before any output, when beyond the profile
        check_run(StepLatency(profile), workload.prompt_len.tolist(), workload.output_len.tolist(), fleet)
    print(
        f"simulating {len(policies)} policies x {len(workloads)} loads, {base.num_requests} requests "
        f"from {base.source}; {fleet.describe()}; {fleet.describe_engines()}",
        file=sys.stderr,
    )
    for note in notes:
        print(note, file=sys.stderr)
    started = time.perf_counter()
    result = run_sweep(profile, workloads, policies, fleet, prediction, slo, shed=args.shed)
    elapsed = time.perf_counter() - started
    table = format_table(result.metrics)
    print(table)
    print(format_extrapolation(result.metrics))
    preemptions = format_preemptions(result.metrics)
    if preemptions is not None:
        print(preemptions)
    print(
        f"({len(result.metrics)} rows, {result.settings['num_runs_simulated']} runs in {elapsed:.1f} s; "
        "latencies in ms, rates in requests/s)"
    )
    # Strict JSON: paths and non-finite numbers (an SLO of inf means "no limit") as text.
    arguments = {
        k: v if isinstance(v, int | None) or (isinstance(v, float) and math.isfinite(v)) else str(v)
        for k, v in vars(args).items()
    }
    arguments.pop("func", None)
    document = {**result.to_json_dict(), "arguments": arguments, "wall_s": elapsed}
    (out / "results.json").write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    (out / "results.md").write_text(
        format_markdown(result.metrics)
        + "\n\n"
        + format_extrapolation(result.metrics)
        + ("" if preemptions is None else "\n" + preemptions)
        + "\n"
    )
    written = [out / "results.json", out / "results.md"]
    if not args.no_plots:
        from solver.plots.sim import plot_e2e_cdf, plot_latency_vs_load

        rates = result.rates
        cdf_rate = args.cdf_rate if args.cdf_rate is not None else rates[len(rates) // 2]
        written.append(plot_latency_vs_load(result, out / "latency_vs_load.png"))
        written.append(plot_e2e_cdf(result, cdf_rate, out / "e2e_cdf.png"))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
