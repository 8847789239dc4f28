"""The profile of a live engine, measured through its OpenAI API (httpx only, no torch).

    pdroute profile --engine-url http://127.0.0.1:8000 [--handoff-url http://127.0.0.1:8001] -o p.json

The engine's own scheduler, chunk budget, kernels and connector are what is measured
(``profiling.sources.live_measure`` says how each point is taken). The result is the usual
``ProfileResult``: ``T_prefill``, ``T_decode``, ``T_interference`` (with ``T_mixed`` and
``T_baseline``), the KV bytes per token from the engine's ``cache_config_info`` (pool bytes /
pool tokens), and the KV path's effective bandwidth: with ``--handoff-url`` (a second engine
sharing the KV connector; the first one prefills, the second loads), the prompt's KV bytes over
the decode engine's TTFT on the handed-over prompt at the longest hand-off length; without it,
the bandwidth must be stated. Provenance: engine kind and version, its ``cache_config_info``,
the chunk budget used, the grids, repeats, per-table spread and the interference slowdowns.
With ``grids.prefix_lens``, ``T_chunk_prefix`` through the engine's prefix cache, and always
``kv_capacity_tokens`` from ``cache_config_info`` (``profiling.sources.live_prefix``).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from profiling.sources.engine_api import EngineAPIError, EngineInfo, discover
from profiling.sources.live_measure import (
    Engine,
    InterferenceSample,
    decode_samples,
    handoff_samples,
    interference_samples,
    prefill_samples,
)
from profiling.sources.live_prefix import check_chunk_prefix_grid, chunk_prefix_samples
from solver.profile_result import ProfileGrids, ProfileResult

# Sized for the CPU engines of the laptop fleet: about 6 minutes on the 1024 x 8 model in float32
# on a heavily loaded 2-core machine (docs/local-fleet.md); a GPU fleet takes the design's full
# grids (ProfileGrids()) and longer hand-offs. Interference beside two decode batches: with one,
# the chunk form's per-token and per-decode terms cannot be told apart, and a fit may put the
# whole cost on either (docs/simulation.md, "Checked against real engines").
LIVE_QUICK_GRIDS = ProfileGrids(
    prompt_lens=(128, 256, 512, 1024),
    kv_lens=(128, 512),
    batch_sizes=(1, 2, 4),
    chunk_sizes=(256, 1024, 2000),
    decode_batches=(2, 6),
    interference_kv_len=64,
    warmup=1,
    repeats=2,
)
HANDOFF_LENS = (256, 1024)


@dataclass(frozen=True)
class LiveProfileRequest:
    engine_url: str
    grids: ProfileGrids
    handoff_url: str | None = None
    handoff_lens: tuple[int, ...] = HANDOFF_LENS
    bandwidth_gbps: float | None = None  # stated instead of measured (no hand-off engine)
    chunk_budget: int | None = None  # the engine's max_num_batched_tokens, when known
    vocab_size: int = 32000  # prompts draw token ids below it
    seed: int = 0
    timeout_s: float = 300.0  # one HTTP request at most
    progress: bool = True


def _spread(samples: Sequence[float]) -> float:
    """(max - min) / median of one point's samples."""
    med = statistics.median(samples)
    return (max(samples) - min(samples)) / med if med > 0 else 0.0


def _bar(total: int, enabled: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    if not enabled:
        return (lambda: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=total, unit="sample", desc="live profile", leave=False)
    return (lambda: bar.update(1)), bar.close


def num_samples(req: LiveProfileRequest) -> int:
    """Samples the request takes in all (the progress bar's total)."""
    g = req.grids
    n = len(g.prompt_lens) + len(g.kv_lens) * len(g.batch_sizes)
    n += len(g.chunk_sizes) * (len(g.decode_batches) + len(g.prefix_lens))
    n = n * g.repeats
    return n + (len(req.handoff_lens) * g.repeats if req.handoff_url else 0)


async def _profile(req: LiveProfileRequest) -> ProfileResult:
    began = time.monotonic()
    timeout = httpx.Timeout(req.timeout_s, connect=5.0)
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        info = await discover(client, req.engine_url)
        other = await discover(client, req.handoff_url) if req.handoff_url else None
        bpt = info.kv_bytes_per_token
        if bpt is None:
            raise EngineAPIError(
                f"{info.url}/metrics: no cache_config_info with the KV pool's bytes and tokens"
            )
        engine = Engine(
            client, info.url, info.model, req.vocab_size, info.max_model_len or 2048, random.Random(req.seed)
        )
        g = req.grids
        block = check_chunk_prefix_grid(info, g.prefix_lens, g.chunk_sizes) if g.prefix_lens else None
        tick, close = _bar(num_samples(req), req.progress)
        samples: dict[str, list[float]] = {}
        try:
            prefill: dict[int, float] = {}
            for n in g.prompt_lens:
                s = samples[f"prefill/{n}"] = await prefill_samples(engine, n, g.warmup, g.repeats, tick)
                prefill[n] = statistics.median(s)
            decode: dict[tuple[int, int], float] = {}
            for kv in g.kv_lens:
                for b in g.batch_sizes:
                    s = samples[f"decode/{kv}x{b}"] = await decode_samples(
                        engine, kv, b, g.warmup, g.repeats, tick
                    )
                    decode[(kv, b)] = statistics.median(s)
            chunk_prefix, hits = await _chunk_prefix(engine, g, block, samples, tick)
            mixed, base, interference, slowdown = await _interference(engine, req, samples, tick)
            bandwidth, handoff_prov = await _bandwidth(engine, req, other, bpt, samples, tick)
        finally:
            close()
    provenance = {
        "source": "live-engine",
        "engine": {"kind": info.kind, "version": info.version, "url": info.url, "model": info.model},
        "cache_config_info": info.cache_config,
        "chunk_budget": req.chunk_budget,
        "max_model_len": info.max_model_len,
        "repeats": g.repeats,
        "warmup": g.warmup,
        "spread_max": {
            t: max((_spread(v) for k, v in samples.items() if k.startswith(t)), default=0.0)
            for t in ("prefill", "decode", "mixed", "handoff")
        },
        "interference_slowdown": slowdown,
        "handoff": handoff_prov,
        **({"chunk_prefix_cache_hits": hits} if g.prefix_lens else {}),
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    return ProfileResult(
        T_prefill=prefill,
        T_decode=decode,
        T_interference=interference,
        T_mixed=mixed,
        T_baseline=base,
        T_chunk_prefix=chunk_prefix,
        kv_capacity_tokens=info.kv_capacity_tokens,
        interference_kv_len=g.interference_kv_len,
        p2p_bandwidth_GBps=bandwidth,
        bytes_per_token=bpt,
        model_config={"name": info.model, "max_model_len": info.max_model_len},
        device={"name": f"{info.kind} engine at {info.url}"},
        transfer_path="kv-connector" if req.handoff_url else "stated",
        versions={"engine": info.version},
        grids={**g.to_json_dict(), "handoff_lens": list(req.handoff_lens) if req.handoff_url else []},
        samples=samples,
        provenance=provenance,
    )


async def _chunk_prefix(
    engine: Engine,
    g: ProfileGrids,
    block: int | None,
    samples: dict[str, list[float]],
    tick: Callable[[], None],
) -> tuple[dict[tuple[int, int], float], dict[str, Any]]:
    """``T_chunk_prefix`` and, per point, the prefix-cache hits seen ("unverified" where the
    engine does not count them)."""
    table: dict[tuple[int, int], float] = {}
    hits: dict[str, Any] = {}
    if block is None:
        return table, hits
    for p in g.prefix_lens:
        for c in g.chunk_sizes:
            points = await chunk_prefix_samples(engine, p, c, block, g.warmup, g.repeats, tick)
            name = f"chunk_prefix/{p}x{c}"
            samples[name] = [s.ttft_ms for s in points]
            table[(p, c)] = statistics.median(samples[name])
            seen = [s.hit_tokens for s in points]
            hits[name] = "unverified" if None in seen else min(h for h in seen if h is not None)
    return table, hits


async def _interference(
    engine: Engine, req: LiveProfileRequest, samples: dict[str, list[float]], tick: Callable[[], None]
) -> tuple[
    dict[tuple[int, int], float], dict[tuple[int, int], float], dict[tuple[int, int], float], dict[str, Any]
]:
    g = req.grids
    mixed: dict[tuple[int, int], float] = {}
    base: dict[tuple[int, int], float] = {}
    slowdown: dict[str, Any] = {}
    for p in g.chunk_sizes:
        for b in g.decode_batches:
            points: list[InterferenceSample] = await interference_samples(
                engine, p, b, g.interference_kv_len, g.repeats, tick
            )
            chunk = min(p, req.chunk_budget - b) if req.chunk_budget else p
            key = (chunk, b)
            samples[f"mixed/{chunk}x{b}"] = [s.mixed_ms for s in points]
            samples[f"baseline/{chunk}x{b}"] = [s.baseline_ms for s in points]
            mixed[key] = statistics.median(s.mixed_ms for s in points)
            base[key] = statistics.median(s.baseline_ms for s in points)
            window = statistics.median(s.window_mean_ms for s in points)
            slowdown[f"{p}x{b}"] = {
                "prompt_tokens": p,
                "decode_batch": b,
                "baseline_ms": round(base[key], 3),
                "step_ms": round(mixed[key], 3),
                "window_mean_ms": round(window, 3),
                "window_slowdown": round(window / base[key], 3),
                "prefill_ttft_ms": round(statistics.median(s.prefill_ttft_ms for s in points), 3),
            }
    return mixed, base, {k: mixed[k] - base[k] for k in mixed}, slowdown


async def _bandwidth(
    engine: Engine,
    req: LiveProfileRequest,
    other: EngineInfo | None,
    bytes_per_token: int,
    samples: dict[str, list[float]],
    tick: Callable[[], None],
) -> tuple[float, dict[str, Any]]:
    if other is None:
        if req.bandwidth_gbps is None:
            raise EngineAPIError(
                "no KV path to measure: give --handoff-url (a second engine) or --bandwidth-gbps"
            )
        return req.bandwidth_gbps, {"stated_bandwidth_GBps": req.bandwidth_gbps}
    block = other.block_size
    if block is None:
        raise EngineAPIError(f"{other.url}/metrics: no block_size in cache_config_info")
    prov: dict[str, Any] = {"decode_url": other.url, "block_size": block, "points": {}}
    bandwidth = 0.0
    for n in req.handoff_lens:
        pairs = await handoff_samples(engine, other.url, n, block, req.grids.warmup, req.grids.repeats, tick)
        samples[f"handoff/{n}"] = [d for _, d in pairs]
        load_ms = statistics.median(d for _, d in pairs)
        prov["points"][str(n)] = {
            "prefill_ttft_ms": round(statistics.median(p for p, _ in pairs), 3),
            "decode_ttft_ms": round(load_ms, 3),
        }
        bandwidth = n * bytes_per_token / (load_ms * 1e6)  # GB/s; the longest length is kept
    prov["effective_bandwidth_GBps"] = bandwidth
    return bandwidth, prov


def profile_live_engine(req: LiveProfileRequest) -> ProfileResult:
    """Measure the engine at ``req.engine_url``; ``EngineAPIError`` (one line) when it cannot be."""
    return asyncio.run(_profile(req))
