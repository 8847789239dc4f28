"""The gateway's view as a decision model's request: ``RouteView`` -> ``RouteInputs``.

A policy wrapping a ``pdroute_core.routing`` model passes ``route_inputs(view)`` to its ``decide``.
Every optional input is reported (the simulator knows them all), so the model assumes nothing:

| RouteInputs | RouteView |
|---|---|
| prefill_queue_requests | prefill_queue_depth |
| prefill_queue_tokens | prefill_queue_tokens |
| prefill_running_requests | prefill_inflight |
| prefill_running_tokens | prefill_inflight_tokens (the running prefills' prompt tokens) |
| prefill_pool_gpus | num_prefill_gpus (at least 1: without prefill GPUs no policy is asked) |
| pending_prefill_tokens | colloc_pending_prefill_tokens |
| decode_pending_prefill_tokens | decode_pending_prefill_tokens |
| colloc_context_tokens / decode_context_tokens | the same names |
| cached_prompt_tokens | 0: the simulator has no prefix cache |
| ttft_slo_ms / tpot_slo_ms | the run's SLO (None when infinite: no target) |
| colloc_prefill_tokens_per_s / decode_prefill_tokens_per_s | the same names (each GPU's rate) |

The prefill rates are each GPU's prompt tokens in the steps started over the last
``PREFILL_RATE_WINDOW_MS`` (``BatchingGpu.prefill_tokens_per_s``): the past only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdroute_core.routing.types import RouteInputs

if TYPE_CHECKING:  # policies.py builds its model policies on route_inputs
    from solver.sim.policies import RouteView


def _target(ms: float) -> float | None:
    return ms if math.isfinite(ms) else None


def route_inputs(view: RouteView) -> RouteInputs:
    """The request and fleet state of ``view`` in a decision model's terms (table above)."""
    return RouteInputs(
        prompt_len=view.prompt_len,
        predicted_output_len=view.predicted_output_len,
        system_load=view.system_load,
        decode_batch_size=view.decode_batch_size,
        chunk_size=view.chunk_size,
        prefill_queue_requests=view.prefill_queue_depth,
        prefill_queue_tokens=view.prefill_queue_tokens,
        prefill_running_requests=view.prefill_inflight,
        prefill_running_tokens=view.prefill_inflight_tokens,
        prefill_pool_gpus=max(view.num_prefill_gpus, 1),
        pending_prefill_tokens=view.colloc_pending_prefill_tokens,
        decode_pending_prefill_tokens=view.decode_pending_prefill_tokens,
        colloc_context_tokens=view.colloc_context_tokens,
        decode_context_tokens=view.decode_context_tokens,
        cached_prompt_tokens=0,
        ttft_slo_ms=_target(view.ttft_slo_ms),
        tpot_slo_ms=_target(view.tpot_slo_ms),
        colloc_prefill_tokens_per_s=view.colloc_prefill_tokens_per_s,
        decode_prefill_tokens_per_s=view.decode_prefill_tokens_per_s,
    )
