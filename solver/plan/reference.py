"""Reference optimum of the split: a direct search over x and both batches within capacity.

It drops the CUF/TUF structure and asks only: with x decode machines, prefill batch B_p in
[L_p, prefill limit] and decode batch n_d in [1, decode limit], both sides free to idle (alpha <= 1),
what is the highest flow-balanced request rate min((X - x)*T_p(B_p)/L_p, x*T_d(n_d)/L_d)?

Given x the two sides are independent, so the best batches are the maximisers of T_p and T_d over
their ranges. Those are searched on a grid that holds every point where such a maximum can sit:
the range ends, every measured breakpoint inside (piecewise-linear curves peak at breakpoints),
and the parabola's vertex (quadratic fits); plus a uniform grid for good measure. The search is
therefore exact for both fit kinds, and no CUF or TUF candidate (whose batches lie in the same
ranges) can beat it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.plan.baseline import Limits
from solver.plan.curves import PiecewiseLinear, Throughput, throughput_at

FloatArray = npt.NDArray[np.float64]
UNIFORM_POINTS = 129


@dataclass(frozen=True)
class ReferenceOptimum:
    """The best split found by direct search (fleet totals; batches per machine)."""

    decode_machines: int  # x
    prefill_machines: int  # X - x
    prefill_batch_tokens: float  # B_p maximising T_p over [L_p, prefill limit]
    decode_batch: float  # n_d maximising T_d over [1, decode limit]
    prefill_tokens_per_s: float  # delivered, after idling the faster side
    decode_tokens_per_s: float
    rate_rps: float  # requests/s
    num_points_searched: int  # x values times batch grid points


def search_grid(curve: Throughput, lo: float, hi: float) -> FloatArray:
    """Batches in [lo, hi] that contain the maximiser of ``curve`` on that range."""
    points = [np.linspace(lo, hi, UNIFORM_POINTS)]
    if isinstance(curve, PiecewiseLinear):
        points.append(np.asarray(curve.batches))
    elif curve.c2 != 0.0:
        points.append(np.asarray([-curve.c1 / (2.0 * curve.c2)]))
    grid = np.concatenate(points)
    # sorted, so that argmax reports the smallest batch reaching the maximum
    return np.sort(grid[(grid >= lo) & (grid <= hi)])


@dataclass(frozen=True)
class ThroughputPeaks:
    """Where each phase's throughput peaks within its batch range (they depend on the prompt
    length and the limits, not on the fleet or the output length)."""

    prefill_batch_tokens: float  # B_p maximising T_p over [L_p, prefill limit]
    prefill_tokens_per_s: float  # T_p there, per machine
    decode_batch: float  # n_d maximising T_d over [1, decode limit]
    decode_tokens_per_s: float  # T_d there, per machine
    num_batch_points: int  # batches searched, both phases


def throughput_peaks(
    prefill: Throughput, decode: Throughput, limits: Limits, prompt_len: int
) -> ThroughputPeaks:
    """The maximisers of T_p over [L_p, prefill limit] and T_d over [1, decode limit]."""
    grid_p = search_grid(prefill, float(prompt_len), limits.prefill.batch)
    grid_d = search_grid(decode, 1.0, limits.decode.batch)
    t_p, t_d = throughput_at(prefill, grid_p), throughput_at(decode, grid_d)
    i_p, i_d = int(np.argmax(t_p)), int(np.argmax(t_d))
    return ThroughputPeaks(
        float(grid_p[i_p]), float(t_p[i_p]), float(grid_d[i_d]), float(t_d[i_d]), len(grid_p) + len(grid_d)
    )


def reference_optimum(
    prefill: Throughput,
    decode: Throughput,
    limits: Limits,
    machines: int,
    prompt_len: int,
    output_len: int,
    peaks: ThroughputPeaks | None = None,
) -> ReferenceOptimum:
    """Direct search over x in 1..X-1 and both batch ranges (see the module docstring);
    ``peaks``, when given, are ``throughput_peaks`` of the same curves, limits and prompt length."""
    if peaks is None:
        peaks = throughput_peaks(prefill, decode, limits, prompt_len)
    x = np.arange(1, machines, dtype=np.float64)
    rates = np.minimum(
        (machines - x) * peaks.prefill_tokens_per_s / prompt_len, x * peaks.decode_tokens_per_s / output_len
    )
    k = int(np.argmax(rates))
    rate = float(rates[k])
    return ReferenceOptimum(
        decode_machines=k + 1,
        prefill_machines=machines - k - 1,
        prefill_batch_tokens=peaks.prefill_batch_tokens,
        decode_batch=peaks.decode_batch,
        prefill_tokens_per_s=rate * prompt_len,
        decode_tokens_per_s=rate * output_len,
        rate_rps=rate,
        num_points_searched=len(x) * peaks.num_batch_points,
    )
