"""Shared test factories: params, models and requests that several test modules build.

Import them from here (a test module never imports another's names): ``TEST_PARAMS`` and
``write_params`` for params files, ``qa_model`` on round ``FORMS`` whose terms can be
checked by hand, ``route_inputs_st`` (hypothesis) and ``random_route_inputs`` for requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from pdroute_core.params import params_from_dict
from pdroute_core.routing import QueueAwareModel, RouteInputs

# A hand-made parameter set for tests (not a profile of any real GPU): the design's RTX 4090
# figures for gamma, bandwidth and batch_thresh, with round alpha and beta.
TEST_PARAMS: dict[str, Any] = {
    "schema_version": 1,
    "alpha": 0.05,
    "beta": 20.0,
    "batch_thresh": 16,
    "gamma": 0.0869,
    "bandwidth_GBps": 12.9,
    "bytes_per_token": 147456,
    "metadata": {
        "model": "test-model",
        "hardware": "test-gpu",
        "transfer_path": "pinned-relay",
        "source": "tests",
        "created_at": "2026-01-01T00:00:00+00:00",
    },
}


# Step-time forms of the queue-aware model for tests (round values of the order a fit of the
# embedded H100 profile gives; not a profile of any real GPU). With them a file is schema 2.
TEST_QUEUE_AWARE: dict[str, float] = {
    "prefill_floor_ms": 9.0,
    "prefill_ms_per_token": 0.02,
    "prefill_knee_tokens": 344.0,
    "decode_base_ms": 6.5,
    "decode_ms_per_seq": 0.013,
    "decode_ms_per_context_token": 4.4e-05,
    "chunk_ms_per_token": 0.008,
    "chunk_ms_per_token_sq": 1.2e-05,
    "chunk_ms_per_token_seq": 1.7e-05,
}


def write_params(path: Path, **overrides: Any) -> Path:
    """Write a params file: TEST_PARAMS with ``overrides`` applied to the top level."""
    data = {**TEST_PARAMS, **overrides}
    path.write_text(json.dumps(data))
    return path


# Round forms so every term below can be checked by hand.
FORMS = {
    "prefill_floor_ms": 10.0,
    "prefill_ms_per_token": 0.02,
    "prefill_knee_tokens": 100.0,
    "decode_base_ms": 5.0,
    "decode_ms_per_seq": 0.01,
    "decode_ms_per_context_token": 1e-5,
    "chunk_ms_per_token": 0.01,
    "chunk_ms_per_token_sq": 0.0,
    "chunk_ms_per_token_seq": 0.0,
}
# TEST_PARAMS: bytes_per_token 147456, bandwidth 12.9 GB/s.
XFER = 147456 / 12.9e6


def qa_model(harm_weight: float = 0.0, **forms: float) -> QueueAwareModel:
    """A queue-aware model on TEST_PARAMS with the round ``FORMS`` (``forms`` replace some)."""
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": {**FORMS, **forms}}
    return QueueAwareModel(params_from_dict(doc), harm_weight=harm_weight)


_optional_count = st.one_of(st.none(), st.integers(0, 200_000))
# Any request the service accepts, each optional input reported or not.
route_inputs_st = st.builds(
    RouteInputs,
    prompt_len=st.integers(1, 100_000),
    predicted_output_len=st.integers(1, 20_000),
    system_load=st.integers(0, 1024),
    decode_batch_size=st.integers(0, 1024),
    chunk_size=st.integers(1, 8192),
    prefill_queue_requests=st.one_of(st.none(), st.integers(0, 500)),
    prefill_queue_tokens=_optional_count,
    prefill_running_requests=st.one_of(st.none(), st.integers(0, 64)),
    prefill_pool_gpus=st.one_of(st.none(), st.integers(1, 64)),
    pending_prefill_tokens=_optional_count,
    decode_pending_prefill_tokens=_optional_count,
    colloc_context_tokens=_optional_count,
    decode_context_tokens=_optional_count,
    cached_prompt_tokens=st.one_of(st.none(), st.integers(0, 100_000)),
    ttft_slo_ms=st.one_of(st.none(), st.floats(1.0, 10_000.0)),
    tpot_slo_ms=st.one_of(st.none(), st.floats(1.0, 500.0)),
    colloc_prefill_tokens_per_s=st.one_of(st.none(), st.floats(0.0, 1e7)),
    decode_prefill_tokens_per_s=st.one_of(st.none(), st.floats(0.0, 1e7)),
    prefill_running_tokens=st.one_of(st.none(), st.integers(0, 10_000_000)),
    prefill_running_elapsed_ms=st.one_of(st.none(), st.floats(0.0, 100_000.0)),
    colloc_tpot_slack_ms=st.one_of(st.none(), st.floats(0.0, 100_000.0)),
    colloc_tpot_slack2_ms=st.one_of(st.none(), st.floats(0.0, 100_000.0)),
    colloc_feasible_routes=st.one_of(st.none(), st.integers(0, 3)),
    decode_feasible_routes=st.one_of(st.none(), st.integers(0, 3)),
    colloc_cached_prompt_tokens=st.one_of(st.none(), st.integers(0, 100_000)),
    prefill_cached_prompt_tokens=st.one_of(st.none(), st.integers(0, 100_000)),
    pending_prefill_prefix_tokens=st.one_of(st.none(), st.floats(0, 100_000)),
    pending_prefill_requests=st.one_of(st.none(), st.integers(0, 40)),
    prefill_arrival_tokens_per_s=st.one_of(st.none(), st.floats(0, 1e6)),
    prefill_step_tokens=st.one_of(st.none(), st.integers(1, 20_000)),
    colloc_arrivals_per_s=st.one_of(st.none(), st.floats(0, 1000)),
)


def random_route_inputs(n: int, seed: int, missing: float = 0.2) -> list[RouteInputs]:
    """``n`` requests, each optional input missing with probability ``missing``."""
    rng = np.random.default_rng(seed)

    def maybe(low: int, high: int) -> list[int | None]:
        return [None if rng.random() < missing else int(v) for v in rng.integers(low, high, n)]

    optional: dict[str, list[Any]] = {
        "prefill_queue_requests": maybe(0, 20),
        "prefill_queue_tokens": maybe(0, 50_000),
        "prefill_running_requests": maybe(0, 8),
        "prefill_pool_gpus": maybe(1, 8),
        "pending_prefill_tokens": maybe(0, 4096),
        "decode_pending_prefill_tokens": maybe(0, 4096),
        "colloc_context_tokens": maybe(0, 200_000),
        "decode_context_tokens": maybe(0, 200_000),
        "cached_prompt_tokens": maybe(0, 512),
        "ttft_slo_ms": [None if v is None else float(v) for v in maybe(50, 3000)],
        "tpot_slo_ms": [None if v is None else float(v) for v in maybe(5, 100)],
        "colloc_prefill_tokens_per_s": [None if v is None else v / 7.0 for v in maybe(0, 200_000)],
        "decode_prefill_tokens_per_s": [None if v is None else v / 3.0 for v in maybe(0, 200_000)],
        "prefill_running_tokens": maybe(0, 60_000),
        "prefill_running_elapsed_ms": [None if v is None else v / 9.0 for v in maybe(0, 20_000)],
        "colloc_tpot_slack_ms": [None if v is None else v / 11.0 for v in maybe(0, 20_000)],
        "colloc_feasible_routes": maybe(0, 3),
        "decode_feasible_routes": maybe(0, 3),
        "colloc_cached_prompt_tokens": maybe(0, 512),
        "prefill_cached_prompt_tokens": maybe(0, 512),
        "pending_prefill_prefix_tokens": [None if v is None else v / 3.0 for v in maybe(0, 20_000)],
        "pending_prefill_requests": maybe(0, 12),
        "prefill_arrival_tokens_per_s": [None if v is None else v * 7.5 for v in maybe(0, 4000)],
        "prefill_step_tokens": maybe(1, 8192),
        "colloc_arrivals_per_s": [None if v is None else v / 20.0 for v in maybe(0, 200)],
    }
    # The second least slack: the least and more (none where either is missing).
    optional["colloc_tpot_slack2_ms"] = [
        None if s is None or e is None else s + e / 13.0
        for s, e in zip(optional["colloc_tpot_slack_ms"], maybe(0, 20_000), strict=True)
    ]
    return [
        RouteInputs(
            int(rng.integers(1, 8192)),
            int(rng.integers(1, 2048)),
            int(rng.integers(0, 64)),
            int(rng.integers(0, 64)),
            int(rng.integers(1, 1024)),
            **{name: values[i] for name, values in optional.items()},
        )
        for i in range(n)
    ]
