"""The simulator against real engines: one trace through real vLLM CPU engines and through
``pdroute simulate`` on the engines' own live profile; measured against simulated TTFT and TPOT.

    PDROUTE_ENGINES_VENV=/work/venvs/engines .venv/bin/python -m bench.bench_sim_vs_engines \\
        [--model tiny|heavy] [--trace poisson|azure] [--requests 200] [--loads 0.3,0.6] \\
        [--profile live.json] [--json out.json]

The fleet is localfleet's pair: a prefill engine (p0, one prompt per step) and a decode engine
(d0, chunked prefill with a token budget of ``--budget``), one core each, KV over
ExampleConnector. The profile is ``pdroute profile --engine-url p0 --handoff-url d0 --quick``,
measured in the same run (or ``--profile``), and fitted as ``pdroute fit`` does. Each mode
replays the same requests through ``pdroute proxy`` under a static policy: ``collocated`` (every
request prefilled and decoded on d0) and ``disaggregated`` (prefilled on p0, decoded on d0; the
client's first token is the prefill engine's). The simulator runs the same fleet (one prefill
GPU, one decode GPU, the same budget, the first token read where the proxy reads it) on the
same arrivals. Loads are fractions of one engine's prefill capacity (1 / the profile's prefill
time of the mean prompt). Last, the queue-aware model fitted from the profile predicts each
served request's TTFT from the inputs the proxy saw (``GET /decisions``): median and p90 of
predicted / measured. Latencies are shown as the client saw them, as the proxy sent the
tokens (``GET /decisions``), and as simulated: on a machine with no core to spare for the proxy
and the client beside the engines, the first two part. Before and after each run a lone
request on the idle d0 measures how much slower than its profile the engine is at that moment
(1 = as profiled): on a shared machine that factor, not the simulator, can explain a gap.
The prefill engine's own histograms over each run (its ``/metrics`` before and after) say how
it served the prompts: engine steps, prompts per step (vLLM puts every waiting prompt that fits
the token budget in one step), and its mean prefill and queue times per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_proxy_replay import AZURE_CSV, replay, workload
from bench.proxy_client import ProxyProcess, Timed, quantile
from pdroute_core.routing import COLLOCATED, QueueAwareModel, RouteInputs
from pdroute_core.routing.queue_aware import FIRST_TOKEN_PREFILL
from solver.fit import fit_profile
from solver.params import save_params
from solver.profile_io import load_profile
from solver.sim.fleet import FleetConfig
from solver.sim.latency import StepLatency
from solver.sim.policies import make_policy
from solver.sim.sweep import simulate
from solver.sim.workload import Workload

MODES = ("collocated", "disaggregated")
QUANTILES = (0.5, 0.9, 0.99)


def figures(ttft_ms: list[float], tpot_ms: list[float]) -> dict[str, float]:
    out = {f"ttft_p{round(q * 100)}": quantile(ttft_ms, q) for q in QUANTILES}
    out.update({f"tpot_p{round(q * 100)}": quantile(tpot_ms, q) for q in QUANTILES})
    return out


def measured(results: list[Timed]) -> dict[str, float]:
    """As the client saw it."""
    ok = [t for t in results if t.ok]
    tpots = [t.tpot_s * 1e3 for t in ok if t.tpot_s is not None]
    return {**figures([t.ttft_s * 1e3 for t in ok], tpots), "lost": float(len(results) - len(ok))}


def at_proxy(decisions: list[dict[str, Any]]) -> dict[str, float]:
    """As the proxy sent the tokens (``GET /decisions``): no client in the way."""
    ok = [d for d in decisions if d["outcome"] == "ok" and d["ttft_ms"] is not None]
    return figures([d["ttft_ms"] for d in ok], [d["tpot_ms"] for d in ok if d["tpot_ms"] is not None])


def simulated(profile: Any, w: Workload, mode: str, budget: int, prefill_budget: int = 0) -> dict[str, float]:
    """The simulator's figures for ``mode`` on the engines' fleet: d0's step budget ``budget``,
    p0's ``prefill_budget`` (0: one prompt a pass; the engines': every waiting prompt that fits)."""
    fleet = FleetConfig(
        topology="conditional",
        num_prefill=1,
        num_decode=1,
        max_num_batched_tokens=budget,
        max_num_seqs=min(256, budget),
        first_token="prefill-engine",
        prefill_batch_tokens=prefill_budget,
        # A quick profile of the engines measures few batches: the simulated side may reach past
        # them, extended linearly and counted (``extrapolated_steps``), never refused.
        allow_extrapolation=True,
    )
    records = simulate(profile, w, make_policy(mode), fleet)
    tpot = records.tpot_ms
    out = figures(list(records.ttft_ms), [float(x) for x in tpot[~np.isnan(tpot)]])
    return {**out, "extrapolated_steps": float(records.num_extrapolated_steps)}


async def probe(url: str, model: str, prompt_len: int, seed: int) -> tuple[float, float]:
    """Lone requests' median TTFT and inter-token time on the idle engine at ``url`` (ms): one
    warm-up, then three."""
    from profiling.sources.engine_api import fresh_prompt, stream_completion

    rng = random.Random(seed)
    ttfts: list[float] = []
    gaps: list[float] = []
    async with httpx.AsyncClient(timeout=300) as client:
        for i in range(4):
            s = await stream_completion(client, url, model, fresh_prompt(rng, prompt_len), 17)
            if i:
                ttfts.append(s.ttft_ms)
                gaps.extend(s.gaps_ms())
    return quantile(ttfts, 0.5), quantile(gaps, 0.5)


def slowdown(profile: Any, url: str, model: str, prompt_len: int, seed: int) -> dict[str, float]:
    """How much slower than its profile the engine is now: a lone prefill and decode step."""
    ttft, gap = asyncio.run(probe(url, model, prompt_len, seed))
    steps = StepLatency(profile)
    return {
        "prefill_x": ttft / steps.prefill_ms(prompt_len),
        "decode_x": gap / steps.decode_ms(prompt_len + 8, 1),
    }


# vLLM's histograms read from the prefill engine: engine steps and per-request phases.
ENGINE_HISTOGRAMS = {
    "steps": "vllm:iteration_tokens_total",
    "prefill": "vllm:request_prefill_time_seconds",
    "queue": "vllm:request_queue_time_seconds",
}


def engine_histograms(url: str) -> dict[str, tuple[float, float]]:
    """(count, sum) of each of ``ENGINE_HISTOGRAMS`` on the engine at ``url`` now."""
    return parse_histograms(httpx.get(f"{url}/metrics", timeout=10).text)


def parse_histograms(text: str) -> dict[str, tuple[float, float]]:
    """(count, sum) of each of ``ENGINE_HISTOGRAMS`` in a Prometheus text exposition."""
    found: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(text):
        for key, name in ENGINE_HISTOGRAMS.items():
            if family.name == name.removesuffix("_total") or family.name == name:
                count = sum(s.value for s in family.samples if s.name.endswith("_count"))
                total = sum(s.value for s in family.samples if s.name.endswith("_sum"))
                found[key] = (count, total)
    return found


def engine_served(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """How the engine served a run: its steps, prompts per step, mean prefill and queue ms."""
    delta = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after if k in before}
    steps = delta.get("steps", (0.0, 0.0))[0]
    requests, prefill_s = delta.get("prefill", (0.0, 0.0))
    queue_s = delta.get("queue", (0.0, 0.0))[1]
    return {
        "steps": steps,
        "requests": requests,
        "prompts_per_step": requests / steps if steps else float("nan"),
        "prefill_ms_mean": 1e3 * prefill_s / requests if requests else float("nan"),
        "queue_ms_mean": 1e3 * queue_s / requests if requests else float("nan"),
    }


def predicted_over_measured(decisions: list[dict[str, Any]], model: QueueAwareModel) -> dict[str, float]:
    """The queue-aware model's TTFT of the served path, from the proxy's inputs, over the TTFT
    the proxy measured: median and p90 over the requests served as decided."""
    ratios = []
    for d in decisions:
        if d["outcome"] != "ok" or d["fallbacks"] or not d["ttft_ms"]:
            continue
        b = model.decide(RouteInputs(**d["inputs"]))
        predicted = b.ttft_collocated_ms if d["served"] == COLLOCATED else b.ttft_disaggregated_ms
        ratios.append(predicted / d["ttft_ms"])
    return {"model_ratio_p50": quantile(ratios, 0.5), "model_ratio_p90": quantile(ratios, 0.9)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", choices=("tiny", "heavy"))
    p.add_argument("--trace", default="poisson", choices=("poisson", "azure"))
    p.add_argument("--azure-csv", type=Path, default=AZURE_CSV)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--loads", default="0.3,0.6", help="fractions of one engine's prefill capacity")
    p.add_argument("--budget", type=int, default=512, help="d0's --max-num-batched-tokens")
    p.add_argument("--prompt-mean", type=float, default=300.0)
    p.add_argument("--output-mean", type=float, default=24.0)
    p.add_argument("--max-prompt", type=int, default=1024, help="the quick profile's largest prompt")
    p.add_argument("--max-output", type=int, default=64)
    p.add_argument("--profile", type=Path, help="a live profile of these engines (default: measure it now)")
    p.add_argument("--modes", default=",".join(MODES), help="collocated, disaggregated or both")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every figure here")
    args = p.parse_args()
    from localfleet import BLOCK_SIZE, HEAVY, TINY, EngineSpec, Fleet
    from profiling.io import save_profile
    from profiling.sources.live_engine import LIVE_QUICK_GRIDS, LiveProfileRequest, profile_live_engine

    shape = HEAVY if args.model == "heavy" else TINY
    tmp = Path(tempfile.mkdtemp(prefix="pdroute-bench-sim-engines-"))
    specs: list[EngineSpec] = [
        EngineSpec("p0", shape, core=0, role="prefill", kv_cache_bytes=256 * 2**20),
        EngineSpec(
            "d0", shape, core=1, role="decode", kv_cache_bytes=256 * 2**20, max_num_batched_tokens=args.budget
        ),
    ]
    prefill_budget = specs[0].token_budget or 0
    fleet = Fleet.start(specs, run_dir=tmp / "fleet")
    print(f"fleet p0 + d0 ({shape.name}) healthy in {fleet.start_s:.1f} s", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        if args.profile is None:
            req = LiveProfileRequest(
                engine_url=fleet["p0"].url,
                grids=LIVE_QUICK_GRIDS,
                handoff_url=fleet["d0"].url,
                chunk_budget=4096,
                seed=args.seed,
            )
            profile = profile_live_engine(req)
            args.profile = save_profile(profile, tmp / "live.json")
            print(f"live profile: {args.profile}", flush=True)
            fleet.wipe_kv()
        profile = load_profile(args.profile)
        params, _ = fit_profile(profile)
        params_path = save_params(params, tmp / "params.json")
        model = QueueAwareModel(params, first_token=FIRST_TOKEN_PREFILL)  # as the proxy predicts
        w = workload(args)
        mean_prompt = round(float(np.mean(w.prompt_len)))
        prefill_ms = StepLatency(profile).prefill_ms(mean_prompt)
        capacity = 1e3 / prefill_ms
        print(
            f"trace {w.source}: {w.num_requests} requests, prompt mean {np.mean(w.prompt_len):.0f}, "
            f"output mean {np.mean(w.output_len):.0f}; prefill of the mean prompt {prefill_ms:.0f} ms "
            f"(capacity {capacity:.2f} req/s)",
            flush=True,
        )
        engines = fleet.engines_file(tmp / "engines.json")
        for fraction in (float(x) for x in args.loads.split(",")):
            rate = fraction * capacity
            for mode in args.modes.split(","):
                env = {
                    "PDROUTE_POLICY": mode,
                    "PDROUTE_PARAMS_PATH": str(params_path),
                    "PDROUTE_KV_BLOCK_SIZE": str(BLOCK_SIZE),
                    "PDROUTE_CHUNK_SIZE": str(args.budget),
                    "PDROUTE_PREFILL_TIMEOUT_S": "300",
                    "PDROUTE_READ_TIMEOUT_S": "300",
                }
                before = slowdown(profile, fleet["d0"].url, shape.name, mean_prompt, args.seed + len(rows))
                proxy = ProxyProcess(engines, tmp / f"proxy-{mode}-{fraction}.log", **env)
                p0_before = engine_histograms(fleet["p0"].url)
                try:
                    rng = random.Random(args.seed)
                    results, _ = asyncio.run(replay(proxy.url, w, rate, rng, shape.name))
                    decisions = httpx.get(f"{proxy.url}/decisions", timeout=10).json()["decisions"]
                    p0 = engine_served(p0_before, engine_histograms(fleet["p0"].url))
                finally:
                    proxy.stop()
                    fleet.wipe_kv()
                after = slowdown(
                    profile, fleet["d0"].url, shape.name, mean_prompt, args.seed + len(rows) + 99
                )
                fleet.wipe_kv()
                real = measured(results)
                # p0 as the engine runs it (every waiting prompt that fits its budget in a step),
                # and one prompt a pass (the simulator's default, as docs/simulation.md's tables).
                sim = simulated(profile, w.at_rate(rate), mode, args.budget, prefill_budget)
                sim_one = simulated(profile, w.at_rate(rate), mode, args.budget)
                row = {
                    "mode": mode,
                    "load": fraction,
                    "rate": rate,
                    "measured": real,
                    "at_proxy": at_proxy(decisions),
                    "simulated": sim,
                    "simulated_one_prompt_a_pass": sim_one,
                    **predicted_over_measured(decisions, model),
                    "loadavg_1m": os.getloadavg()[0],  # the machine's, at the end of the run
                    # d0 against its profile just before and after the run (1: as profiled)
                    "slowdown_before": before,
                    "slowdown_after": after,
                    "p0": p0,  # how the prefill engine served the run (disaggregated)
                    "p0_profile_prefill_ms": prefill_ms,  # the profile's prefill of the mean prompt
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        fleet.stop()
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}))
    table(rows)
    return 0


def table(rows: list[dict[str, Any]]) -> None:
    keys = [f"{m}_p{round(q * 100)}" for m in ("ttft", "tpot") for q in QUANTILES]
    head = " | ".join(f"{k} ms: client / proxy / sim (sim/proxy)" for k in keys)
    print(
        f"\n| mode | load | {head} | model/proxy TTFT p50, p90 | d0 vs profile before -> after | load avg |"
    )
    print("|---|---|" + "---|" * len(keys) + "---|---|---|")
    for r in rows:
        cells = []
        for k in keys:
            client, proxy, sim = r["measured"][k], r["at_proxy"][k], r["simulated"][k]
            cells.append(f"{client:,.0f} / {proxy:,.0f} / {sim:,.0f} ({sim / proxy:.2f})")
        model = f"{r['model_ratio_p50']:.2f}, {r['model_ratio_p90']:.2f}"
        slow = " -> ".join(
            f"x{r[k]['prefill_x']:.2f}/x{r[k]['decode_x']:.2f}" for k in ("slowdown_before", "slowdown_after")
        )
        print(
            f"| {r['mode']} | {r['load']:.2f} ({r['rate']:.2f}/s) | "
            + " | ".join(cells)
            + f" | {model} | {slow} | {r['loadavg_1m']:.1f} |"
        )
    print(
        "\n| mode | load | TTFT p50 / p90 / p99 ms: proxy | sim, p0 as the engine | sim, one prompt a pass |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [
            " / ".join(f"{r[side][f'ttft_p{q}']:,.0f}" for q in (50, 90, 99))
            for side in ("at_proxy", "simulated", "simulated_one_prompt_a_pass")
        ]
        print(f"| {r['mode']} | {r['load']:.2f} | " + " | ".join(cells) + " |")
    print(
        "\n| mode | load | p0 steps | prompts per step | p0 prefill ms per request "
        "(profile, mean prompt) | p0 queue ms per request |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        s = r["p0"]
        print(
            f"| {r['mode']} | {r['load']:.2f} | {s['steps']:.0f} | {s['prompts_per_step']:.2f} | "
            f"{s['prefill_ms_mean']:.0f} ({r['p0_profile_prefill_ms']:.0f}) | {s['queue_ms_mean']:.0f} |"
        )
    lost = sum(r["measured"]["lost"] for r in rows)
    extrapolated = sum(r["simulated"]["extrapolated_steps"] for r in rows)
    print(
        f"(requests lost on the engines: {lost:.0f}; simulated steps beyond the profile: {extrapolated:.0f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
