"""Synthetic ``ProfileResult``s generated from chosen cost-model parameters (tests only).

Each table follows the design's forms exactly (optionally with a fixed prefill cost, a kv_len
slope or load-scaled interference, to break them on purpose). With ``noise`` > 0 every point is
the median of ``repeats`` samples, each the exact value times ``1 + noise * N(0, 1)`` from a
seeded generator: the profiler's own procedure (median of 10 timed runs) on noisy timings.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from solver.profile_result import ProfileGrids, ProfileResult

DESIGN_GRIDS = ProfileGrids()
# Denser grids for the noisy recoveries: 5% noise on one median-of-10 point is ~2% on that
# point, so each parameter needs several points to land within 2% with a wide margin.
DENSE_GRIDS = ProfileGrids(
    prompt_lens=tuple(range(128, 4096 + 1, 128)),
    kv_lens=tuple(range(128, 4096 + 1, 256)),
    batch_sizes=(1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    chunk_sizes=(64, 128, 192, 256, 384, 512, 768, 1024),
    decode_batches=(4, 8, 16, 32, 64),
)


def synthetic_profile(
    *,
    alpha: float = 0.05,
    beta: float = 7.0,
    batch_thresh: float = 12.0,
    gamma: float = 0.04,
    bandwidth_GBps: float = 300.0,
    bytes_per_token: int = 147456,
    grids: ProfileGrids = DESIGN_GRIDS,
    noise: float = 0.0,
    seed: int = 0,
    repeats: int = 10,
    prefill_fixed_ms: float = 0.0,
    decode_kv_slope_ms: float = 0.0,
    interference_load_scaled: bool = False,
    interference_offset_ms: float = 0.0,
    provenance: dict[str, Any] | None = None,
) -> ProfileResult:
    """A profile whose medians follow the given parameters (see the module docstring)."""
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {}

    def measure(name: str, exact: float) -> float:
        if noise == 0:
            samples[name] = [exact] * repeats
            return exact
        draws = exact * (1.0 + noise * rng.standard_normal(repeats))
        samples[name] = [float(v) for v in draws]
        return float(np.median(draws))

    def step(kv: int, b: int) -> float:
        return beta * max(1.0, b / batch_thresh) + decode_kv_slope_ms * kv

    prefill = {n: measure(f"prefill/{n}", prefill_fixed_ms + alpha * n) for n in grids.prompt_lens}
    decode = {
        (kv, b): measure(f"decode/{kv}x{b}", step(kv, b)) for kv in grids.kv_lens for b in grids.batch_sizes
    }
    kv_i = grids.interference_kv_len
    baseline: dict[tuple[int, int], float] = {}
    mixed: dict[tuple[int, int], float] = {}
    interference: dict[tuple[int, int], float] = {}
    for c in grids.chunk_sizes:
        for b in grids.decode_batches:
            scale = min(b, batch_thresh) / batch_thresh if interference_load_scaled else 1.0
            base = measure(f"baseline/{c}x{b}", step(kv_i, b))
            mix = measure(f"mixed/{c}x{b}", step(kv_i, b) + interference_offset_ms + gamma * c * scale)
            baseline[(c, b)], mixed[(c, b)] = base, mix
            interference[(c, b)] = mix - base
    return ProfileResult(
        T_prefill=prefill,
        T_decode=decode,
        T_interference=interference,
        T_mixed=mixed,
        T_baseline=baseline,
        interference_kv_len=kv_i,
        p2p_bandwidth_GBps=bandwidth_GBps,
        bytes_per_token=bytes_per_token,
        model_config={"name": "synthetic-8b", "num_layers": 36},
        device={"src": "Synthetic GPU", "dst": "Synthetic GPU"},
        transfer_path="nvlink",
        versions={"generator": "tests.solver.synthetic_profiles"},
        grids=grids.to_json_dict(),
        samples=samples,
        provenance=provenance
        if provenance is not None
        else {"source": "synthetic", "created_at": "2026-01-01T00:00:00+00:00", "seed": seed},
    )


def with_tables(profile: ProfileResult, **tables: Any) -> ProfileResult:
    """A copy of ``profile`` with some fields replaced (for broken profiles)."""
    return replace(profile, **tables)
