"""Head-to-head on real engines: the same trace through ``pdroute proxy`` under each policy, at
several loads, repeated; goodput, SLO attainment, TTFT/TPOT p50/p99, share disaggregated, fallbacks.

    PDROUTE_ENGINES_VENV=/work/venvs/engines nice -n 10 .venv/bin/python -m bench.bench_proxy_replay \\
        [--model heavy] [--trace poisson|azure] [--loads 0.4,0.9,1.5] [--requests 40] [--repeats 2] \\
        [--policies pdroute,collocated,disaggregated,threshold,threshold-queue,pdroute-short-window] \\
        [--ttft-slo-ms 1500] [--tpot-slo-ms 60] [--json out.json] [--decisions DIR]

The fleet is localfleet's prefill + decode pair (one core each, ExampleConnector). The params
pdroute decides with come from ``bench.proxy_fit`` (a quick fit of these engines, measured in the
same run) unless ``--params`` names a file. A trace is Poisson arrivals with log-normal lengths,
or the first requests of the Azure conversation trace, its lengths rescaled to this fleet
(``--azure-csv``); every load replays the same requests with the time axis scaled. Each
request's prompt is fresh (random token ids), so no prefix cache hides a prefill. Policies run
in a rotated order per repeat, the KV folder is wiped between runs. The proxy is told p0's token
budget per step (``PDROUTE_PREFILL_STEP_TOKENS``); ``pdroute-one-prompt-step`` is pdroute without
it, ``pdroute-short-window`` pdroute without the proxy's long window of arrivals,
``pdroute-shed`` pdroute with ``PDROUTE_ADMISSION_CONTROL=shed`` (a request the model says to
shed is answered 503 at once: counted as shed, not lost). A request meets its SLO when its TTFT
and its TPOT are within the targets; goodput counts those per second of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.proxy_client import ProxyProcess, Timed, quantile, session, timed_stream
from bench.proxy_fit import measure, params_of
from solver.sim.trace import read_trace
from solver.sim.workload import LengthDistribution, Workload, poisson_workload

AZURE_CSV = Path("/work/shared/data/azure-llm-trace/AzureLLMInferenceTrace_conv.csv")
THRESHOLD_TOKENS = 512
# A policy named with one of these suffixes runs pdroute without one input, the same run's
# baseline for it: without PDROUTE_PREFILL_STEP_TOKENS (as before it knew that p0 puts several
# prompts in a step), or without the long window of arrivals (PDROUTE_ARRIVAL_WINDOW_S=0: the
# two-second routes stand for the rate of decodes coming).
ONE_PROMPT_STEP = "-one-prompt-step"
SHORT_WINDOW = "-short-window"
SHED = "-shed"  # not a baseline: pdroute acting on its admission advice


def proxy_env(
    policy: str, params_path: Path, slo_ms: tuple[float, float], prefill_budget: int | None, block_size: int
) -> dict[str, str]:
    """The proxy's settings for one run of ``policy`` (a baseline variant runs pdroute without its
    input; ``-shed`` runs it acting on its admission advice)."""
    env = {
        "PDROUTE_POLICY": policy.removesuffix(SHED).removesuffix(ONE_PROMPT_STEP).removesuffix(SHORT_WINDOW),
        "PDROUTE_PARAMS_PATH": str(params_path),
        "PDROUTE_KV_BLOCK_SIZE": str(block_size),
        "PDROUTE_THRESHOLD_TOKENS": str(THRESHOLD_TOKENS),
        "PDROUTE_MAX_QUEUE_DEPTH": "2",
        "PDROUTE_DEFAULT_TTFT_SLO_MS": str(slo_ms[0]),
        "PDROUTE_DEFAULT_TPOT_SLO_MS": str(slo_ms[1]),
        "PDROUTE_CHUNK_SIZE": "2048",
        "PDROUTE_PREFILL_TIMEOUT_S": "120",
        "PDROUTE_READ_TIMEOUT_S": "120",
    }
    if prefill_budget is not None and not policy.endswith(ONE_PROMPT_STEP):
        env["PDROUTE_PREFILL_STEP_TOKENS"] = str(prefill_budget)
    if policy.endswith(SHORT_WINDOW):
        env["PDROUTE_ARRIVAL_WINDOW_S"] = "0"
    if policy.endswith(SHED):
        env["PDROUTE_ADMISSION_CONTROL"] = "shed"
    return env


def workload(args: argparse.Namespace) -> Workload:
    if args.trace == "poisson":
        lengths = LengthDistribution(
            "lognormal", prompt_mean=args.prompt_mean, output_mean=args.output_mean, sigma=0.8
        )
        w = poisson_workload(args.requests, 1.0, lengths, seed=args.seed)
    else:
        w = read_trace(args.azure_csv).head(args.requests)
        scale = args.prompt_mean / float(np.mean(w.prompt_len))
        w = Workload(
            w.arrival_s - w.arrival_s[0],
            np.maximum(1, np.rint(w.prompt_len * scale)).astype(np.int64),
            np.maximum(1, np.rint(w.output_len * args.output_mean / float(np.mean(w.output_len)))).astype(
                np.int64
            ),
            f"azure-conv head {args.requests}, lengths rescaled",
        )
    return Workload(
        w.arrival_s,
        np.clip(w.prompt_len, 16, args.max_prompt),
        np.clip(w.output_len, 2, args.max_output),
        w.source,
    )


async def replay(
    url: str, w: Workload, rate: float, rng: random.Random, model: str
) -> tuple[list[Timed], float]:
    scaled = w.at_rate(rate)
    started = time.perf_counter()
    async with session() as client:

        async def one(i: int) -> Timed:
            delay = float(scaled.arrival_s[i]) - (time.perf_counter() - started)
            if delay > 0:
                await asyncio.sleep(delay)
            prompt = [rng.randrange(1, 31_000) for _ in range(int(scaled.prompt_len[i]))]
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": int(scaled.output_len[i]),
                "ignore_eos": True,
            }
            return await timed_stream(client, f"{url}/v1/completions", {**body, "return_token_ids": True})

        results = await asyncio.gather(*(one(i) for i in range(scaled.num_requests)))
    return list(results), time.perf_counter() - started


def counter(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def summarise(
    results: list[Timed], wall_s: float, metrics: str, args: argparse.Namespace
) -> dict[str, float]:
    ok = [t for t in results if t.ok]
    tpots = [t.tpot_s for t in ok if t.tpot_s is not None]
    good = [
        t
        for t in ok
        if t.ttft_s * 1e3 <= args.ttft_slo_ms and (t.tpot_s is None or t.tpot_s * 1e3 <= args.tpot_slo_ms)
    ]
    decided = counter(metrics, "pdroute_proxy_decisions_total")
    shed = counter(metrics, "pdroute_proxy_requests_total", outcome="shed")  # refused on the advice
    return {
        "lost": len(results) - len(ok) - shed,
        "shed": shed,
        "goodput": len(good) / wall_s,
        "attainment": len(good) / len(results),
        "ttft_p50_ms": quantile([t.ttft_s for t in ok], 0.5) * 1e3,
        "ttft_p99_ms": quantile([t.ttft_s for t in ok], 0.99) * 1e3,
        "tpot_p50_ms": quantile(tpots, 0.5) * 1e3,
        "tpot_p99_ms": quantile(tpots, 0.99) * 1e3,
        "ttft_miss": sum(t.ttft_s * 1e3 > args.ttft_slo_ms for t in ok) / max(1, len(ok)),
        "disaggregated": counter(metrics, "pdroute_proxy_decisions_total", path="disaggregated")
        / max(1.0, decided),
        "fallbacks": counter(metrics, "pdroute_proxy_fallbacks_total"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="heavy", choices=("tiny", "heavy"))
    p.add_argument("--trace", default="poisson", choices=("poisson", "azure"))
    p.add_argument("--azure-csv", type=Path, default=AZURE_CSV)
    p.add_argument(
        "--loads",
        default="auto",
        help="requests/s, comma-separated; auto: 0.35, 0.7 and 1.05 times one engine's prefill capacity"
        " (1 / the reference prefill time of the mean prompt: bench.proxy_fit's straight line)",
    )
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--policies", default="pdroute,collocated,disaggregated,threshold,threshold-queue")
    p.add_argument("--prompt-mean", type=float, default=600.0)
    p.add_argument("--output-mean", type=float, default=24.0)
    p.add_argument("--max-prompt", type=int, default=2048)
    p.add_argument("--max-output", type=int, default=64)
    p.add_argument(
        "--ttft-slo-ms", type=float, help="default: 4 x the reference prefill time of the mean prompt"
    )
    p.add_argument("--tpot-slo-ms", type=float, help="default: 3 x the fitted decode step at batch 4")
    p.add_argument("--params", type=Path, help="params for pdroute (default: a quick fit of the engines now)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every run's figures here")
    p.add_argument(
        "--decisions", type=Path, help="save each run's GET /decisions here (DIR/POLICY-LOAD-REPEAT.json)"
    )
    args = p.parse_args()
    from localfleet import BLOCK_SIZE, HEAVY, TINY, EngineSpec, Fleet

    shape = HEAVY if args.model == "heavy" else TINY
    tmp = Path(tempfile.mkdtemp(prefix="pdroute-bench-replay-"))
    specs = [
        EngineSpec("p0", shape, core=0, role="prefill", kv_cache_bytes=256 * 2**20),
        EngineSpec("d0", shape, core=1, role="decode", kv_cache_bytes=256 * 2**20),
    ]
    prefill_budget = specs[0].token_budget  # p0's step: every waiting prompt that fits it
    fleet = Fleet.start(specs, run_dir=tmp / "fleet")
    print(f"fleet p0 + d0 ({shape.name}) healthy in {fleet.start_s:.1f} s", flush=True)
    runs: list[dict[str, Any]] = []
    try:
        kv_bytes = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 2  # K and V, bf16
        params_path = args.params
        reference: tuple[float, float] | None = None  # the bench's reference prefill: floor, ms/token
        if params_path is None:
            fit = asyncio.run(measure(fleet["p0"].url, fleet["d0"].url, kv_bytes))
            print(f"quick fit: {json.dumps({k: v for k, v in fit.items()}, default=str)}", flush=True)
            params_path = tmp / "params.json"
            params_path.write_text(json.dumps(params_of(fit, kv_bytes, shape.name), indent=1))
            reference = (fit["reference_floor_ms"], fit["reference_ms_per_token"])
        qa = json.loads(params_path.read_text())["queue_aware"]
        if reference is None:  # no measurements: the file's own straight terms
            reference = (qa["prefill_floor_ms"], qa["prefill_ms_per_token"])
        fleet.wipe_kv()
        w = workload(args)
        prefill_ms = reference[0] + reference[1] * float(np.mean(w.prompt_len))
        step_ms = qa["decode_base_ms"] + 4 * qa["decode_ms_per_seq"]
        if args.ttft_slo_ms is None:
            args.ttft_slo_ms = round(4 * prefill_ms)
        if args.tpot_slo_ms is None:
            args.tpot_slo_ms = round(3 * step_ms, 1)
        if args.loads == "auto":
            capacity = 1e3 / prefill_ms
            args.loads = ",".join(f"{f * capacity:.2f}" for f in (0.35, 0.7, 1.05))
        print(
            f"prefill of the mean prompt {prefill_ms:.0f} ms, decode step (B=4) {step_ms:.1f} ms: "
            f"loads {args.loads} req/s",
            flush=True,
        )
        engines = fleet.engines_file(tmp / "engines.json")
        policies = [s.strip() for s in args.policies.split(",") if s.strip()]
        loads = [float(x) for x in args.loads.split(",")]
        print(
            f"trace {w.source}: {w.num_requests} requests, prompt mean {np.mean(w.prompt_len):.0f}, "
            f"output mean {np.mean(w.output_len):.0f}; "
            f"SLO TTFT {args.ttft_slo_ms:g} ms, TPOT {args.tpot_slo_ms:g} ms",
            flush=True,
        )
        slo_ms = (args.ttft_slo_ms, args.tpot_slo_ms)
        for r in range(args.repeats):
            for rate in loads:
                order = policies[r % len(policies) :] + policies[: r % len(policies)]
                for policy in order:
                    env = proxy_env(policy, params_path, slo_ms, prefill_budget, BLOCK_SIZE)
                    proxy = ProxyProcess(engines, tmp / f"proxy-{policy}-{rate}-{r}.log", **env)
                    try:
                        rng = random.Random(hash((policy, rate, r)) & 0xFFFFFFFF)
                        results, wall = asyncio.run(replay(proxy.url, w, rate, rng, shape.name))
                        figures = summarise(results, wall, proxy.metrics_text(), args)
                        if args.decisions is not None:  # each request as the proxy saw it
                            args.decisions.mkdir(parents=True, exist_ok=True)
                            seen = httpx.get(f"{proxy.url}/decisions", timeout=10).text
                            (args.decisions / f"{policy}-{rate}-{r}.json").write_text(seen)
                    finally:
                        proxy.stop()
                        fleet.wipe_kv()
                    runs.append({"policy": policy, "load": rate, "repeat": r, **figures})
                    print(
                        f"  {policy:<24} load {rate:4.2f} repeat {r}: "
                        + " ".join(f"{k} {v:.3g}" for k, v in figures.items()),
                        flush=True,
                    )
    finally:
        fleet.stop()
    if args.json is not None:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=1)
        )
    table(runs, policies, [float(x) for x in args.loads.split(",")])
    return 0


def table(runs: list[dict[str, Any]], policies: list[str], loads: list[float]) -> None:
    keys = (
        "goodput",
        "attainment",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "disaggregated",
        "fallbacks",
        "lost",
        "shed",
    )
    print(f"\n{'load':>5} {'policy':<24} " + " ".join(f"{k:>20}" for k in keys))
    for rate in loads:
        for policy in policies:
            mine = [x for x in runs if x["policy"] == policy and x["load"] == rate]
            cells = []
            for k in keys:
                values = [x[k] for x in mine]
                mid = statistics.mean(values)
                cells.append(f"{mid:10.3g} [{min(values):.3g}-{max(values):.3g}]".rjust(20))
            print(f"{rate:5.2f} {policy:<24} " + " ".join(cells))
    print("(mean [min-max] over repeats; goodput in requests/s meeting both targets; ms otherwise)")


if __name__ == "__main__":
    raise SystemExit(main())
