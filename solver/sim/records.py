"""``SimRecords``: what one simulation run leaves behind, one entry per request.

Times are milliseconds from the first arrival. Definitions used by every metric:

- TTFT = ``first_token_ms - arrival_ms``, as a client sees it. Collocated, the first token is
  out when the step that finishes the prefill ends; disaggregated (``FleetConfig.first_token``),
  by default when the decode engine's first decode step for it ends (admitted at the step
  boundary after the KV transfer, KV seen at the one after), or when the prefill engine's pass
  ends for a proxy streaming that token.
- end-to-end latency = ``finish_ms - arrival_ms`` (the last token is out).
- TPOT = ``(finish_ms - first_token_ms) / (output_len - 1)``: undefined (NaN) for one-token
  outputs, which are left out of TPOT statistics.
- the prefill wait of a disaggregated request = ``prefill_start_ms - arrival_ms``: until its
  pass starts on a prefill GPU (NaN for a collocated or shed request).
- a shed request (the gateway dropped it, ``is_shed``) has no first token and no finish: its
  times are NaN, so every latency above is NaN for it and statistics leave it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# ``RouteView``'s integer fields, in order, and the ones recorded per request (prompt and
# prediction have their own fields; chunk size, prefill GPUs and SLO targets are the run's).
VIEW_ROW = (
    "prompt_len",
    "predicted_output_len",
    "system_load",
    "decode_batch_size",
    "prefill_queue_requests",
    "chunk_size",
    "colloc_context_tokens",
    "pending_prefill_tokens",
    "colloc_num_waiting",
    "decode_context_tokens",
    "decode_pending_prefill_tokens",
    "prefill_queue_tokens",
    "prefill_running_requests",
    "prefill_running_tokens",
    "prefill_pool_gpus",
)
RECORDED_VIEW_FIELDS = tuple(n for n in VIEW_ROW[2:] if n not in ("chunk_size", "prefill_pool_gpus"))


def view_columns(views: Sequence[tuple[float | None, ...]]) -> dict[str, Any]:
    """``RECORDED_VIEW_FIELDS`` as int64 arrays, from per-arrival ``RouteView`` tuples (whose
    first fields are ``VIEW_ROW``)."""
    columns = {}
    for name in RECORDED_VIEW_FIELDS:
        k = VIEW_ROW.index(name)
        columns[name] = np.array([v[k] for v in views], dtype=np.int64)
    return columns


@dataclass(frozen=True, eq=False)
class SimRecords:
    """Per-request outcomes and the gateway's view at each decision, plus run counters."""

    policy: str  # the policy's name
    arrival_ms: FloatArray
    first_token_ms: FloatArray
    finish_ms: FloatArray
    prefill_start_ms: FloatArray  # when its pass started on a prefill GPU (NaN: none)
    prompt_len: IntArray
    output_len: IntArray  # tokens the request asked for
    predicted_output_len: IntArray  # what the policy was told
    is_disaggregated: BoolArray  # the path taken
    was_policy_asked: BoolArray  # False where the fleet offered only one path
    # The view the policy saw (see RouteView for each field's meaning).
    system_load: IntArray
    decode_batch_size: IntArray
    prefill_queue_requests: IntArray
    colloc_context_tokens: IntArray
    pending_prefill_tokens: IntArray
    colloc_num_waiting: IntArray
    decode_context_tokens: IntArray
    decode_pending_prefill_tokens: IntArray
    prefill_queue_tokens: IntArray
    prefill_running_requests: IntArray
    prefill_running_tokens: IntArray
    # The policy's answer: predictions for the chosen path (NaN where it gave none or was not
    # asked), "no path meets the SLO", and whether the gateway dropped the request for it.
    predicted_ttft_ms: FloatArray
    predicted_e2e_ms: FloatArray
    is_infeasible: BoolArray
    is_shed: BoolArray
    engine_index: IntArray  # decode / mixed GPU that produced the tokens (pools: mixed first)
    tokens_generated: IntArray  # per request, counted by the engine that served it
    finish_count: IntArray  # times each request finished (1 in a correct run)
    total_tokens_generated: int  # summed over engine steps (decodes per step) and prefills
    num_engine_steps: int  # engine steps run on decode / mixed GPUs
    num_prefill_forwards: int  # forwards run on prefill GPUs
    # Engine steps and prefill-pool passes with a lookup beyond a table's measured range (a linear
    # extrapolation: it underestimates attention's growth); per table in ``extrapolated``.
    num_extrapolated_steps: int
    # Prefix caches (None: the run had none). The decode target's hit at routing, as the view
    # reported it (tokens), and the prompt tokens the prefill skipped where it ran (a hit on the
    # collocation GPU, or on the prefill GPU of a disaggregated request).
    cached_prompt_tokens: IntArray | None = None
    prefix_hit_tokens: IntArray | None = None
    # Per table (T_prefill, T_decode, T_interference, T_chunk_prefix): the steps or passes with a
    # lookup beyond its range (0 everywhere unless the run was allowed to extrapolate).
    extrapolated: Mapping[str, int] = field(default_factory=dict)
    allow_extrapolation: bool = False  # whether the run was allowed beyond the measured ranges
    kv_capacity_tokens: int | None = None  # KV tokens per engine GPU in force (None: unlimited)
    num_preemptions: int = 0  # recompute preemptions on the engine GPUs (KV capacity)
    num_recomputed_tokens: int = 0  # KV tokens the preemptions discarded, prefilled again

    @property
    def num_requests(self) -> int:
        return len(self.arrival_ms)

    @property
    def ttft_ms(self) -> FloatArray:
        return self.first_token_ms - self.arrival_ms

    @property
    def e2e_ms(self) -> FloatArray:
        return self.finish_ms - self.arrival_ms

    @property
    def prefill_wait_ms(self) -> FloatArray:
        """Per-request wait for a prefill GPU (NaN unless it ran on one)."""
        return self.prefill_start_ms - self.arrival_ms

    @property
    def tpot_ms(self) -> FloatArray:
        """Per-request time per output token after the first (NaN for one-token outputs)."""
        steps = (self.output_len - 1).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(steps > 0, (self.finish_ms - self.first_token_ms) / steps, np.nan)

    @property
    def makespan_ms(self) -> float:
        """From the first arrival to the last finish, or the last arrival if later (ms).

        Without shedding the last finish always comes after the last arrival; a shed request
        has no finish, and when every request is shed the span of the arrivals remains.
        """
        served = self.finish_ms[~self.is_shed]
        last = float(np.max(self.arrival_ms))
        if served.size:
            last = max(last, float(np.max(served)))
        return last - float(np.min(self.arrival_ms))

    @property
    def num_served(self) -> int:
        """Requests that entered the fleet (all but the shed ones)."""
        return int(self.num_requests - np.count_nonzero(self.is_shed))


def time_average_in_system(records: SimRecords, t0_ms: float, t1_ms: float) -> float:
    """Mean number of requests in the system over ``[t0_ms, t1_ms]``, by a sweep of events.

    Each request is in the system over ``[arrival, finish)``; the integral of the count over
    the window divided by its length is computed from the clipped intervals.
    """
    if not t1_ms > t0_ms:
        raise ValueError("the window must have t1_ms > t0_ms")
    start = np.clip(records.arrival_ms, t0_ms, t1_ms)
    end = np.clip(records.finish_ms, t0_ms, t1_ms)
    return float(np.sum(end - start) / (t1_ms - t0_ms))


def littles_law(records: SimRecords, t0_ms: float, t1_ms: float) -> tuple[float, float]:
    """``(L, lambda * W)`` over the window: L the time-average number in the system, lambda the
    arrival rate in the window (per ms) and W the mean time in system of those arrivals (ms).

    Little's law says they agree for a stable system over a long window; edge effects make
    them differ by about (requests in flight at the edges) / (arrivals in the window).
    """
    in_window = (records.arrival_ms >= t0_ms) & (records.arrival_ms < t1_ms)
    rate = float(np.count_nonzero(in_window)) / (t1_ms - t0_ms)
    mean_sojourn = float(np.mean(records.e2e_ms[in_window]))
    return time_average_in_system(records, t0_ms, t1_ms), rate * mean_sojourn
