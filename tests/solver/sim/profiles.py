"""Synthetic ``ProfileResult`` tables for the simulator tests (not a profile of any GPU).

Every table is a bilinear function of its two keys, so the simulator's bilinear interpolation
(and its linear extension beyond the grid) reproduces the formula exactly: tests compute the
expected latency from the formula, independently of the interpolation code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from solver.profile_result import ProfileResult
from solver.sim.fleet import FleetConfig

PREFILL_BASE_MS = 4.0  # fixed cost of one prefill forward
PREFILL_MS_PER_TOKEN = 0.05
DECODE_BASE_MS = 6.0
DECODE_MS_PER_SEQ = 0.05
DECODE_MS_PER_KV_TOKEN = 2e-5  # per sequence per context token
INTERF_MS_PER_TOKEN = 0.03
INTERF_MS_PER_TOKEN_SEQ = 0.001
INTERFERENCE_KV_LEN = 512

PROMPT_LENS = (64, 128, 256, 512, 1024, 2048)
KV_LENS = (128, 512, 1024, 2048)
BATCHES = (1, 4, 8, 16, 32)
CHUNKS = (64, 128, 256, 512)
DECODE_BATCHES = (1, 4, 8, 16)


def prefill_formula_ms(prompt_len: float) -> float:
    return PREFILL_BASE_MS + PREFILL_MS_PER_TOKEN * prompt_len


def decode_formula_ms(kv_len: float, batch: float) -> float:
    return DECODE_BASE_MS + DECODE_MS_PER_SEQ * batch + DECODE_MS_PER_KV_TOKEN * kv_len * batch


def interference_formula_ms(chunk: float, decode_batch: float) -> float:
    return INTERF_MS_PER_TOKEN * chunk + INTERF_MS_PER_TOKEN_SEQ * chunk * decode_batch


def make_profile(bandwidth_gbps: float = 12.9, bytes_per_token: int = 147456, **extra: Any) -> ProfileResult:
    """A profile whose tables follow the formulas above on the default grids."""
    baseline = {(c, b): decode_formula_ms(INTERFERENCE_KV_LEN, b) for c in CHUNKS for b in DECODE_BATCHES}
    interference = {(c, b): interference_formula_ms(c, b) for c in CHUNKS for b in DECODE_BATCHES}
    return ProfileResult(
        T_prefill={length: prefill_formula_ms(length) for length in PROMPT_LENS},
        T_decode={(k, b): decode_formula_ms(k, b) for k in KV_LENS for b in BATCHES},
        T_interference=interference,
        T_mixed={key: baseline[key] + interference[key] for key in baseline},
        T_baseline=baseline,
        interference_kv_len=INTERFERENCE_KV_LEN,
        p2p_bandwidth_GBps=bandwidth_gbps,
        bytes_per_token=bytes_per_token,
        model_config={"name": "synthetic"},
        device={"name": "synthetic-gpu"},
        transfer_path="pinned-relay",
        **extra,
    )


# A prefill curve with a steeper top (attention growing with the prompt), for the chunk-pass
# rules: T(64..2048) = 4, 5, 7, 11, 26, 50 ms, and chunks measured up to 1,024 tokens so the
# pass's fixed cost is the intercept of the line through (1024, 26) and (2048, 50): 2 ms.
CONVEX_PREFILL_MS = {64: 4.0, 128: 5.0, 256: 7.0, 512: 11.0, 1024: 26.0, 2048: 50.0}
CONVEX_CHUNKS = (64, 128, 256, 512, 1024)


def make_convex_profile() -> ProfileResult:
    """``make_profile`` with ``CONVEX_PREFILL_MS`` and interference chunks up to 1,024."""
    base = make_profile()
    keys = [(c, b) for c in CONVEX_CHUNKS for b in DECODE_BATCHES]
    baseline = {(c, b): decode_formula_ms(INTERFERENCE_KV_LEN, b) for c, b in keys}
    interference = {(c, b): interference_formula_ms(c, b) for c, b in keys}
    return dataclasses.replace(
        base,
        T_prefill=dict(CONVEX_PREFILL_MS),
        T_interference=interference,
        T_mixed={key: baseline[key] + interference[key] for key in baseline},
        T_baseline=baseline,
    )


def linear_fleet(*args: Any, **kwargs: Any) -> FleetConfig:
    """A ``FleetConfig`` allowed to extrapolate the tables (``solver.sim.extrapolation``).

    For tests whose log-normal workloads reach beyond the synthetic grids (prompts and contexts
    past 2,048 tokens): the synthetic tables are linear in each key, so extending their last
    segment is exact here, and those tests check scheduling, not the tables' range."""
    return FleetConfig(*args, **{**kwargs, "allow_extrapolation": True})
