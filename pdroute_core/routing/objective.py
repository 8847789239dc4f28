"""What a decision optimises (``objective``) and what a gateway should do with the request
(``admission``), on one request's floats and on columns.

Objectives:

- ``latency``: the lowest predicted latency under the targets; a request no path can serve in
  time goes where it uses less of the other requests' target budgets, every victim counted.
- ``goodput``: the most requests within their targets. Past capacity a request that no path
  can serve in time is lost either way; what it can still change is how many others make
  theirs. So its budgets count only the victims the model predicts still on time: the running
  decodes of a GPU whose predicted decode steps are within the target (later prompts' chunks
  aside: those stop when prompts go elsewhere) to which the gateway sent some request expected
  in time, or whose first token came in time, over the last two seconds (``serves``), the
  prefills queued on the pool while the
  pool's predicted wait (with the decode engine's first steps) is within the TTFT target, and the
  prompts pending on the collocation GPU while their wait is within it, where the decode GPU has
  local prefill work of its own (``prefills_locally``: one GPU for both paths): like the pool's
  queue, they stand for the prompts that will queue behind this one there; and the decodes that
  will join the collocation GPU while this prompt is chunked on it, at the rate the gateway sent
  it requests in time lately (``arrivals``). A pool whose wait
  alone is past the target cannot lose more goodput by one more late request: the late ones go
  there, and the GPUs that still serve in time keep doing so; unless the gateway reports that the
  decode GPU has no prompts of its own to prefill (``decode_pending_prefill_tokens`` 0: a decode
  GPU beside mixed GPUs, fed by the pool alone), whose service the pool's loss would end: then the
  pool's queue counts, late or not. With no victim in
  time on either side and the pool late, the request goes where it is later: to the resource
  further from recovering. Requests that both paths serve in time are decided as under
  ``latency``, except that a collocation whose chunks would make the decodes running beside it
  late is not taken (``pdroute_core.routing.queue_aware``).

Admission (both objectives, from the chosen path's predicted lateness ``r = max(TTFT /
ttft_slo, TPOT / tpot_slo)``, 0 without targets):

- ``admit``: the chosen path meets the targets (``r <= 1 - slo_margin``, ``meets_slo``);
- ``defer``: it misses them by no more than the model's own error (``r <= 1 + slo_margin``):
  it may still make them; a gateway with somewhere else to send it (another replica, a short
  wait) should, else admit it;
- ``shed``: it misses them by more than that: serving it takes capacity from requests that
  can still make their targets.

``predicted_lateness_ms`` is how far the chosen path's TTFT is predicted past the TTFT target
(ms; 0 on time or without a target).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from pdroute_core.route_fields import RECENT_WINDOW_MS
from pdroute_core.routing.types import FloatArray

Objective = Literal["latency", "goodput"]
LATENCY: Objective = "latency"
GOODPUT: Objective = "goodput"
OBJECTIVES: tuple[Objective, ...] = (LATENCY, GOODPUT)
# The service's default (PDROUTE_OBJECTIVE; docs/simulation.md: equal goodput wherever some path
# meets the targets, more past capacity). ``QueueAwareModel`` itself defaults to ``latency``: a
# model built without an objective is the one before objectives existed, bit for bit.
DEFAULT_OBJECTIVE: Objective = GOODPUT

Admission = Literal["admit", "defer", "shed"]
ADMIT: Admission = "admit"
DEFER: Admission = "defer"
SHED: Admission = "shed"
ADMISSIONS: tuple[Admission, ...] = (ADMIT, DEFER, SHED)


def parse_objective(value: str) -> Objective:
    """``value`` as an objective; ``ValueError`` naming the accepted ones otherwise."""
    for objective in OBJECTIVES:
        if value == objective:
            return objective
    raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {value!r}")


def on_time(predicted_ms: float, target_ms: float) -> float:
    """1.0 when ``predicted_ms`` is within ``target_ms`` (always without a target), else 0.0."""
    return 1.0 if predicted_ms <= target_ms else 0.0


def on_time_many(predicted_ms: FloatArray, target_ms: FloatArray) -> FloatArray:
    """``on_time`` of each element."""
    return np.where(predicted_ms <= target_ms, 1.0, 0.0)


def serves(feasible_routes: float) -> float:
    """0.0 when a GPU was sent no request expected in time (or with its first token in time)
    over the gateway's window: it serves nobody in time. Else 1.0 (NaN, not reported: it does)."""
    return 0.0 if feasible_routes == 0.0 else 1.0


def serves_many(feasible_routes: FloatArray) -> FloatArray:
    """``serves`` of each element."""
    return np.where(feasible_routes == 0.0, 0.0, 1.0)


def arrivals(feasible_routes: float, during_ms: float, rate_per_s: float) -> float:
    """The requests expected at a GPU over the next ``during_ms``: the gateway's rate of requests
    sent there over a long window (``rate_per_s``) when reported, else its routes of the
    two-second window as a rate; 0 when neither is reported."""
    if not math.isnan(rate_per_s):
        return rate_per_s * during_ms / 1000.0
    return 0.0 if math.isnan(feasible_routes) else feasible_routes * during_ms / RECENT_WINDOW_MS


def arrivals_many(feasible_routes: FloatArray, during_ms: FloatArray, rate_per_s: FloatArray) -> FloatArray:
    """``arrivals`` of each element."""
    routes = np.where(np.isnan(feasible_routes), 0.0, feasible_routes * during_ms / RECENT_WINDOW_MS)
    return np.where(np.isnan(rate_per_s), routes, rate_per_s * during_ms / 1000.0)


def joins(coming: float, feasible_routes: float, rate_per_s: float) -> float:
    """1.0 when at least one decode is expected to join a GPU (``coming``, its ``arrivals``),
    0.0 when fewer; NaN (unknown) when the gateway reports neither its rate nor its routes."""
    if math.isnan(rate_per_s) and math.isnan(feasible_routes):
        return math.nan
    return 1.0 if coming >= 1.0 else 0.0


def joins_many(coming: FloatArray, feasible_routes: FloatArray, rate_per_s: FloatArray) -> FloatArray:
    """``joins`` of each element."""
    unknown = np.isnan(rate_per_s) & np.isnan(feasible_routes)
    return np.where(unknown, math.nan, np.where(coming >= 1.0, 1.0, 0.0))


def prefills_locally(decode_pending_tokens: float) -> float:
    """1.0 when the decode GPU has prompts of its own pending prefill (it is also a collocation
    GPU, busy with local prefills), else 0.0."""
    return 1.0 if decode_pending_tokens > 0.0 else 0.0


def prefills_locally_many(decode_pending_tokens: FloatArray) -> FloatArray:
    """``prefills_locally`` of each element."""
    return np.where(decode_pending_tokens > 0.0, 1.0, 0.0)


def lateness(ttft_ms: float, tpot_ms: float, ttft_slo_ms: float, tpot_slo_ms: float) -> float:
    """``max(TTFT / ttft_slo, TPOT / tpot_slo)``: 0 with neither target, > 1 late."""
    return max(ttft_ms / ttft_slo_ms, tpot_ms / tpot_slo_ms)


def lateness_ms(ttft_ms: float, ttft_slo_ms: float) -> float:
    """How far ``ttft_ms`` is past the TTFT target (ms; 0 on time or without a target)."""
    return 0.0 if ttft_slo_ms == math.inf else max(0.0, ttft_ms - ttft_slo_ms)


def lateness_ms_many(ttft_ms: FloatArray, ttft_slo_ms: FloatArray) -> FloatArray:
    """``lateness_ms`` of each element."""
    with np.errstate(invalid="ignore"):  # inf - inf: not taken
        return np.where(ttft_slo_ms == math.inf, 0.0, np.maximum(0.0, ttft_ms - ttft_slo_ms))


def admission(is_meeting: bool, ratio: float, slo_margin: float) -> Admission:
    """``admit`` / ``defer`` / ``shed`` (module docstring) from ``lateness``'s ratio."""
    if is_meeting:
        return ADMIT
    return DEFER if ratio <= 1.0 + slo_margin else SHED


def admission_index_many(is_meeting: np.ndarray, ratio: FloatArray, slo_margin: float) -> np.ndarray:
    """``admission`` of each element, as an index into ``ADMISSIONS``."""
    late = np.where(ratio <= 1.0 + slo_margin, ADMISSIONS.index(DEFER), ADMISSIONS.index(SHED))
    return np.where(is_meeting, ADMISSIONS.index(ADMIT), late).astype(np.int64)
