"""The queue-aware model's vectorised forms: ``decide``'s expressions on rows of a block.

``pdroute_core.routing.queue_aware_block`` evaluates a block of requests with these. Each
function performs its scalar counterpart's IEEE operations (``QueueAwareModel.prefill_ms``,
``tpot_ms``, ``_pressure``, the choice of the reason), in the same order, with ``out=``
buffers, so every element carries the scalar's bits. The functions read the model's fitted
coefficients (``model._pf``, ``model._a1``, ...): this module is the model's own vectorised
half, kept apart for size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pdroute_core.routing.queue_aware_reasons import (
    COMPONENT_REASON,
    REASON_SLO_NONE,
    REASON_SLO_ONLY,
    REASONS,
)
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, FloatArray

if TYPE_CHECKING:
    from pdroute_core.routing.queue_aware import QueueAwareModel

Flags = npt.NDArray[np.bool_]
Small = npt.NDArray[np.uint8]


def _reason_of(code: int) -> int:
    """The reason index (into REASONS) of ``code = best + 4 * by_cost + 8 * meets + 16 * both``."""
    best, by_cost, meets, both = code & 3, (code >> 2) & 1, (code >> 3) & 1, code >> 4
    if both:  # the component favouring the chosen path most
        return REASONS.index(COMPONENT_REASON[DISAGGREGATED if by_cost else COLLOCATED][best])
    return REASONS.index(REASON_SLO_ONLY if meets else REASON_SLO_NONE)


_REASON_TABLE = np.array([_reason_of(code) for code in range(32)], dtype=np.int64)


def prefill_into(model: QueueAwareModel, tokens: FloatArray, out: FloatArray) -> None:
    """``out = T_P(tokens)``, as ``prefill_ms`` (``out`` may be ``tokens``)."""
    np.subtract(tokens, model._knee, out=out)
    np.maximum(0.0, out, out=out)
    out *= model._p1
    out += model._pf


def prefill_many(model: QueueAwareModel, tokens: FloatArray) -> FloatArray:
    """``T_P(tokens)``, as ``prefill_ms``, in a new array."""
    return model._pf + model._p1 * np.maximum(0.0, tokens - model._knee)


def tpot_into(
    model: QueueAwareModel,
    batch: FloatArray,
    context: FloatArray,
    L: FloatArray,
    half_out: FloatArray,
    pending: FloatArray | float,
    c: FloatArray,
    c_lin: FloatArray,
    rate: FloatArray | None,
    out: FloatArray,
    temps: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
    drain: tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None = None,
) -> None:
    """``out = min((s + min(1, P / c) * f) / (1 - rho), s + f)``, ``s = s(B + 1, K + L + O/2)``,
    ``f = f(c, B + 1)``, ``rho = max(0, min(rate * f / c / 1000, f / (s + f)))`` (``c_lin = i1 + i2 * c``;
    ``tpot_ms``; ``temps``: four scratch rows; ``pending`` is ``P``).

    ``drain = (P', TTFT_d, D, row)``: the disaggregated path's pending share, written into ``row``
    once ``s + f`` is known and read as ``P`` (``pending`` is then not read):
    ``P = max(0, P' - c * TTFT_d / (s + f)) / D``, ``decide``'s ``left / max(1, O - 1)`` (its
    ``step_d + f_d`` is this ``s + f``, bit for bit).

    ``rate`` None: every rate of the block is zero or not reported. ``prefill_share`` then is
    exactly 0.0 whatever ``s`` and ``f`` hold (``min(±0, y)`` is ±0 or a negative ``y``, ``min``
    with a NaN first is that NaN, and ``max(0.0, ·)`` of any of these is 0.0), and a quotient
    by ``1.0 - 0.0 = 1.0`` changes no bit: ``rho``'s operations and the quotient are skipped.
    """
    f, bound, t3, t4 = temps
    np.add(batch, 1.0, out=f)
    np.multiply(f, model._a1, out=out)
    out += model._a0
    np.add(context, L, out=t3)
    t3 += half_out
    t3 *= model._a2
    out += t3  # s
    f *= model._i3
    f += c_lin
    f *= c
    np.add(out, f, out=bound)  # s + f: the bound, and rho's denominator
    if drain is not None:  # the decode GPU's pending tokens left when this request decodes, per step
        pending_d, ttft, steps, pending = drain
        np.multiply(c, ttft, out=pending)
        pending /= bound
        np.subtract(pending_d, pending, out=pending)
        np.maximum(0.0, pending, out=pending)
        pending /= steps
    if rate is not None:  # t3 = 1 - rho
        np.multiply(rate, f, out=t3)
        t3 /= c
        t3 /= 1000.0
        np.divide(f, bound, out=t4)
        np.minimum(t3, t4, out=t3)
        np.maximum(0.0, t3, out=t3)
        np.subtract(1.0, t3, out=t3)
    np.divide(pending, c, out=t4)
    np.minimum(1.0, t4, out=t4)
    t4 *= f
    out += t4
    if rate is not None:
        out /= t3
    np.minimum(out, bound, out=out)


def pressure_into(ratio: FloatArray, target_ms: FloatArray, is_bounded: bool, out: FloatArray) -> None:
    """``out = _pressure`` from ``ratio = predicted / target`` (``is_bounded``: no target is inf)."""
    np.minimum(1.0, ratio, out=out)
    if not is_bounded:
        np.copyto(out, 1.0, where=target_ms == math.inf)


def select_flags(mask: Flags, if_true: Flags, if_false: Flags, out: Flags) -> None:
    """``out = np.where(mask, if_true, if_false)`` for flags: ``b ^ (mask & (a ^ b))``."""
    np.logical_xor(if_true, if_false, out=out)
    out &= mask
    out ^= if_false


def first_max(
    values: tuple[FloatArray, ...],
    best: npt.NDArray[np.int64],
    better: Flags,
    scratch_int: npt.NDArray[np.int64],
) -> None:
    """``best`` = per request, the index of the largest of ``values``, the first of equals.

    ``decide``'s loop: ``values[k]`` replaces the best so far only when strictly greater (a NaN
    never does, and once best, is never beaten). ``values[0]`` is overwritten. Indices only
    grow, so "becomes k" is ``max(best, k * better)``; without NaN the best value so far is a
    plain maximum (ties hold equal values), with one the exact masked copy.
    """
    best_val = values[0]
    has_nan = any(math.isnan(np.maximum.reduce(v)) for v in values)  # a NaN is the maximum
    best.fill(0)
    for k, v in enumerate(values[1:], start=1):
        np.greater(v, best_val, out=better)
        np.multiply(better, k, out=scratch_int)
        np.maximum(best, scratch_int, out=best)
        if has_nan:
            np.copyto(best_val, v, where=better)
        else:
            np.maximum(best_val, v, out=best_val)


def first_max_of_four(
    values: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
    best: Small,
    pair_max: tuple[FloatArray, FloatArray],
    flags: tuple[Flags, Flags, Flags],
) -> None:
    """``best`` = ``first_max`` of four rows, in fewer passes: a knock-out of two pairs.

    Without NaN the values are totally ordered (``-0.0`` equals ``0.0``), and the first of
    the largest is: in each pair the second only when strictly greater, then the second pair
    only when its largest is strictly greater. ``np.maximum`` carries a NaN into a pair's
    maximum, so a NaN anywhere shows in them; then ``first_max``'s exact loop decides (on two
    int rows made for it; ``values[0]`` is overwritten). ``values`` are otherwise kept.
    """
    v0, v1, v2, v3 = values
    m01, m23 = pair_max
    second01, second23, second_pair = flags
    np.greater(v1, v0, out=second01)
    np.maximum(v0, v1, out=m01)
    np.greater(v3, v2, out=second23)
    np.maximum(v2, v3, out=m23)
    if math.isnan(np.maximum.reduce(m01)) or math.isnan(np.maximum.reduce(m23)):
        best_int = np.empty(best.shape, dtype=np.int64)
        first_max(values, best_int, second_pair, np.empty_like(best_int))
        np.copyto(best, best_int, casting="unsafe")  # 0..3
        return
    np.greater(m23, m01, out=second_pair)
    low = second01.view(np.uint8)  # 0 or 1
    np.add(second23.view(np.uint8), 2, out=best)  # 2 or 3
    best ^= low  # best = low ^ (second_pair * (high ^ low))
    best *= second_pair.view(np.uint8)
    best ^= low


def reason_into(
    best: Small,
    by_cost: Flags,
    meets: Flags,
    both: Flags,
    code: Small,
    tmp: Small,
    out: npt.NDArray[np.int64],
) -> None:
    """``out`` = the reason index: with both paths feasible, the component ``best`` of the path
    ``by_cost`` chose; with one, ``slo_only_feasible``; with none, ``slo_none_feasible``.

    One lookup in a table of 32 by ``best + 4 * by_cost + 8 * meets + 16 * both`` (flags are
    the bytes 0 and 1) instead of a selection per case.
    """
    np.left_shift(by_cost.view(np.uint8), 2, out=tmp)
    np.bitwise_or(best, tmp, out=code)
    np.left_shift(meets.view(np.uint8), 3, out=tmp)
    code |= tmp
    np.left_shift(both.view(np.uint8), 4, out=tmp)
    code |= tmp
    np.take(_REASON_TABLE, code, out=out, mode="wrap")  # in range: unbuffered
