"""``pdroute profile --engine-url URL``: the profile of a live engine, through its OpenAI API.

    pdroute profile --engine-url http://127.0.0.1:8000 --handoff-url http://127.0.0.1:8001 \\
        --quick -o live.json        # the CPU-sized grid (a few minutes on the laptop fleet)

The measurements are ``profiling.sources.live_engine``'s (httpx only, no torch); the grid
options (``--prompt-lens`` ...) are the other sources'. ``--quick`` takes the live grid sized
for CPU engines; without it, the design's full grids (for GPU fleets).
"""

from __future__ import annotations

import argparse
from typing import Any

from app.cli.usage import UsageError

LIVE_OPTIONS = ("engine_url", "handoff_url", "handoff_lens", "chunk_budget")


def add_options(p: argparse.ArgumentParser, int_list: Any, positive_int: Any) -> None:
    g = p.add_argument_group("live engine source (an OpenAI-compatible engine with Prometheus /metrics)")
    g.add_argument("--engine-url", metavar="URL", help="the engine to profile (its base URL)")
    g.add_argument("--handoff-url", metavar="URL", help="a second engine on the same KV connector")
    g.add_argument("--handoff-lens", type=int_list, metavar="N,N,...", help="hand-off prompt lengths")
    g.add_argument("--chunk-budget", type=positive_int, help="the engine's max_num_batched_tokens, if known")


def quick_grids() -> Any:
    from profiling.sources.live_engine import LIVE_QUICK_GRIDS

    return LIVE_QUICK_GRIDS


def run(args: argparse.Namespace, grids: Any) -> tuple[Any, Any]:
    """Profile the engine and save it; the ``ProfileResult`` and the path written."""
    from profiling.io import check_output_path, save_profile
    from profiling.sources.live_engine import HANDOFF_LENS, LiveProfileRequest, profile_live_engine

    if args.handoff_url is None and args.bandwidth_gbps is None:
        raise UsageError("--engine-url needs --handoff-url (to measure the KV path) or --bandwidth-gbps")
    if args.handoff_url is not None and args.bandwidth_gbps is not None:
        raise UsageError("give --handoff-url or --bandwidth-gbps, not both")
    out = check_output_path(args.output)
    req = LiveProfileRequest(
        engine_url=args.engine_url,
        grids=grids,
        handoff_url=args.handoff_url,
        handoff_lens=args.handoff_lens or HANDOFF_LENS,
        bandwidth_gbps=args.bandwidth_gbps,
        chunk_budget=args.chunk_budget,
        seed=args.seed or 0,
        progress=not args.no_progress,
    )
    profile = profile_live_engine(req)
    save_profile(profile, out)
    print_interference(profile.provenance.get("interference_slowdown", {}))
    return profile, out


def print_interference(rows: dict[str, Any]) -> None:
    """The running decodes' step beside a prompt of each length, against their step without it."""
    print("interference: prompt tokens, decodes, decode step alone (ms), beside the prompt (ms), slowdown")
    for row in rows.values():
        step, base = row["step_ms"], row["baseline_ms"]
        print(
            f"  {row['prompt_tokens']:>6} {row['decode_batch']:>4} {base:>10.1f} {step:>10.1f}"
            f"   x{step / base:.1f} (x{row['window_slowdown']:.1f} over the prefill)"
        )
