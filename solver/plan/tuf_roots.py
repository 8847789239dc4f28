"""The continuous TUF solutions x* of the split (notation as in ``solver.plan.split``).

TUF runs both sides at alpha = 1: with one batch held at its limit and the other following from
the concurrency balance (X - x)*n_p = x*n_d, the rate balance (X - x)*T_p/L_p = x*T_d/L_d is a
function of x alone. Its roots are found by sampling the residual at the integers of x's range
(where the following batch stays within [one request, its limit]) and bisecting each sign change
``BISECTION_STEPS`` times. A grid row's output lengths are searched together: every element is
computed exactly as a search of its own cell would compute it, so the roots are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from solver.plan.baseline import Limits
from solver.plan.curves import throughput_at
from solver.plan.fitted import FittedCurves

FloatArray = npt.NDArray[np.float64]
BISECTION_STEPS = 30  # brackets are at most one machine wide: about 1e-9 machines of precision

TufRoots = dict[str, FloatArray]  # "TUF-P"/"TUF-D" -> the continuous roots x*
Residual = Callable[[FloatArray, FloatArray], FloatArray]  # (x, output_len) -> rate residual


def _roots_many(residual: Residual, lo: float, hi: float, output_lens: FloatArray) -> list[FloatArray]:
    """For each output length, every sign change of ``residual`` on [lo, hi], sampled at the
    integers and refined by bisection; the cells are searched together, each element computed
    exactly as a search of its cell alone would."""
    empty = [np.empty(0) for _ in output_lens]
    if lo > hi:
        return empty
    # lo, the integers strictly inside (lo, hi), hi: increasing, no duplicates unless lo == hi
    xs = np.concatenate(([lo], np.arange(np.floor(lo) + 1.0, np.ceil(hi)), [hi]))
    rs = residual(xs[None, :], output_lens[:, None])  # [cell, x]
    is_exact = rs == 0.0
    cells, brackets = np.nonzero(rs[:, :-1] * rs[:, 1:] < 0.0)
    if len(cells) == 0 and not is_exact.any():  # the common case: no root on this range
        return empty
    left, right = xs[brackets], xs[brackets + 1]
    sign_left = np.sign(rs[cells, brackets])
    lens = output_lens[cells]
    for _ in range(BISECTION_STEPS if len(cells) else 0):
        mid = 0.5 * (left + right)
        same = np.sign(residual(mid, lens)) == sign_left
        left, right = np.where(same, mid, left), np.where(same, right, mid)
    mids = 0.5 * (left + right)
    return [
        np.unique(np.concatenate((xs[is_exact[k]], mids[cells == k])))
        if is_exact[k].any() or (cells == k).any()
        else empty[k]
        for k in range(len(output_lens))
    ]


def _tuf_ranges(
    model: FittedCurves, limits: Limits, machines: int, prompt_len: int
) -> dict[str, tuple[float, float, Residual]]:
    """Each TUF policy's search range in x (where the following batch stays within [one request,
    its limit]) and its rate residual (X - x)*T_p/L_p - x*T_d/L_d."""
    big_x = float(machines)
    cap_p, cap_d = limits.prefill.batch, limits.decode.batch
    m = cap_p / prompt_len  # n_p at the prefill limit
    t_p_cap = float(throughput_at(model.prefill.throughput, cap_p))
    t_d_cap = float(throughput_at(model.decode.throughput, cap_d))

    def residual_p(x: FloatArray, output_len: FloatArray) -> FloatArray:  # n_p = m, n_d follows
        t_d = throughput_at(model.decode.throughput, (big_x - x) * m / x)
        return (big_x - x) * t_p_cap / prompt_len - x * t_d / output_len

    def residual_d(x: FloatArray, output_len: FloatArray) -> FloatArray:  # n_d = cap_d, n_p follows
        t_p = throughput_at(model.prefill.throughput, x * cap_d / (big_x - x) * prompt_len)
        return (big_x - x) * t_p / prompt_len - x * t_d_cap / output_len

    lo_hi = {
        "TUF-P": (big_x * m / (m + cap_d), big_x * m / (m + 1.0), residual_p),
        "TUF-D": (big_x / (cap_d + 1.0), big_x * m / (cap_d + m), residual_d),
    }
    return {label: (max(lo, 1.0), min(hi, big_x - 1.0), fn) for label, (lo, hi, fn) in lo_hi.items()}


def tuf_roots(
    model: FittedCurves, limits: Limits, machines: int, prompt_len: int, output_lens: Sequence[int]
) -> list[TufRoots]:
    """The continuous TUF roots for each output length (one search per range for them all)."""
    lens = np.asarray(output_lens, dtype=np.float64)
    ranges = _tuf_ranges(model, limits, machines, prompt_len)
    found = {label: _roots_many(fn, lo, hi, lens) for label, (lo, hi, fn) in ranges.items()}
    return [{label: found[label][k] for label in ranges} for k in range(len(lens))]
