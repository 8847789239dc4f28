"""``SimRecords``: what one simulation run leaves behind, one entry per request.

Times are milliseconds from the first arrival. Definitions used by every metric:

- TTFT = ``first_token_ms - arrival_ms``. The first token comes from the prefill; collocated it
  is out when the step that finishes the prefill ends; disaggregated when the KV transfer to
  the decode GPU ends (the decode GPU streams it).
- end-to-end latency = ``finish_ms - arrival_ms`` (the last token is out).
- TPOT = ``(finish_ms - first_token_ms) / (output_len - 1)``: undefined (NaN) for one-token
  outputs, which are left out of TPOT statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class SimRecords:
    """Per-request outcomes and the gateway's view at each decision, plus run counters."""

    policy: str  # the policy's name
    arrival_ms: FloatArray
    first_token_ms: FloatArray
    finish_ms: FloatArray
    prompt_len: IntArray
    output_len: IntArray  # tokens the request asked for
    predicted_output_len: IntArray  # what the policy was told
    is_disaggregated: BoolArray  # the path taken
    was_policy_asked: BoolArray  # False where the fleet offered only one path
    system_load: IntArray  # the view the policy saw (see RouteView)
    decode_batch_size: IntArray
    prefill_queue_depth: IntArray
    engine_index: IntArray  # decode / mixed GPU that produced the tokens (pools: mixed first)
    tokens_generated: IntArray  # per request, counted by the engine that served it
    finish_count: IntArray  # times each request finished (1 in a correct run)
    total_tokens_generated: int  # summed over engine steps (decodes per step) and prefills
    num_engine_steps: int  # engine steps run on decode / mixed GPUs
    num_prefill_forwards: int  # forwards run on prefill GPUs

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
    def tpot_ms(self) -> FloatArray:
        """Per-request time per output token after the first (NaN for one-token outputs)."""
        steps = (self.output_len - 1).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(steps > 0, (self.finish_ms - self.first_token_ms) / steps, np.nan)

    @property
    def makespan_ms(self) -> float:
        """From the first arrival to the last finish (ms)."""
        return float(np.max(self.finish_ms) - np.min(self.arrival_ms))


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
