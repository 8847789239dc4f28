"""The queue-aware model's vectorised evaluation: ``decide`` on many requests, the same bits.

``QueueAwareModel.decide_many`` (``pdroute_core.routing.queue_aware``, whose docstring holds
the formulas) calls ``decide_many`` here. Every function evaluates ``decide``'s operations in
``decide``'s order on IEEE doubles, so its answers agree with ``decide``'s bit for bit (a
property test checks it); keep that order when changing either side. The functions read the
model's fitted coefficients (``model._pf``, ``model._a1``, ...): this module is the model's own
vectorised half, kept apart for size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pdroute_core.routing.queue_aware_reasons import (
    COMPONENT_REASON,
    REASON_SLO_NONE,
    REASON_SLO_ONLY,
    REASONS,
)
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, FloatArray, RouteColumns

if TYPE_CHECKING:
    from pdroute_core.routing.queue_aware import QueueAwareModel

BLOCK = 8192  # requests per block of the vectorised evaluation

# The float terms of ``QueueAwareBreakdown`` (ms unless named otherwise), one array each.
TERMS = (
    "t_collocated_ms",
    "t_disaggregated_ms",
    "ttft_collocated_ms",
    "ttft_disaggregated_ms",
    "tpot_collocated_ms",
    "tpot_disaggregated_ms",
    "local_backlog_ms",
    "local_prefill_ms",
    "chunk_steps",
    "prefill_wait_ms",
    "prefill_ms",
    "transfer_ms",
    "harm_collocated_ms",
    "harm_disaggregated_ms",
    "cost_collocated_ms",
    "cost_disaggregated_ms",
)

# Reason index in REASONS by (chosen path: 0 collocated, 1 disaggregated, component).
_REASON_LOOKUP = np.array(
    [[REASONS.index(name) for name in COMPONENT_REASON[path]] for path in (COLLOCATED, DISAGGREGATED)]
)
_SLO_ONLY_INDEX = REASONS.index(REASON_SLO_ONLY)
_SLO_NONE_INDEX = REASONS.index(REASON_SLO_NONE)


@dataclass(frozen=True)
class Answers:
    """The decisions of many requests, one array per term; a block's are views into them."""

    terms: dict[str, FloatArray]  # every name of TERMS
    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]  # into REASONS


def decide_many(model: QueueAwareModel, cols: RouteColumns) -> Answers:
    """``model.decide`` for every request of ``cols``, vectorised: the same bits.

    Evaluated in blocks of ``BLOCK`` requests, so that the intermediate arrays stay in the
    CPU's cache (several times faster than whole-array passes on a million requests). Every
    intermediate has its own preallocated row of scratch (``_Scratch``) and every term is
    written straight into its result array, so a block allocates little: the rows of an
    idle GPU, one selection, and the defaults of a column reported for some requests only.
    """
    n = cols.num_requests
    terms = {name: np.empty(n) for name in TERMS}
    is_disagg = np.empty(n, dtype=np.bool_)
    meets = np.empty(n, dtype=np.bool_)
    reason = np.empty(n, dtype=np.int64)
    # A column reported for every request is read as it is (no NaN to replace); a target
    # column without NaN or +inf needs no "no target" case. A column's maximum is NaN when
    # it holds one, and +inf when it holds that: one reduction per column.
    top = {name: float(np.maximum.reduce(col)) if n else 0.0 for name, col in cols.optional.items()}
    complete = frozenset(name for name, value in top.items() if not math.isnan(value))
    bounded = frozenset(name for name in ("ttft_slo_ms", "tpot_slo_ms") if math.isfinite(top[name]))
    scratch = _Scratch(min(n, BLOCK))
    for start in range(0, n, BLOCK):
        end = min(start + BLOCK, n)
        block = Answers(
            {name: values[start:end] for name, values in terms.items()},
            is_disagg[start:end],
            meets[start:end],
            reason[start:end],
        )
        _decide_block(model, cols, start, end, complete, bounded, scratch, block)
    return Answers(terms, is_disagg, meets, reason)


def _decide_block(
    model: QueueAwareModel,
    cols: RouteColumns,
    start: int,
    end: int,
    complete: frozenset[str],
    bounded: frozenset[str],
    scratch: _Scratch,
    res: Answers,
) -> None:
    """Requests ``start:end`` of ``cols`` into ``res``: ``decide``'s operations, in its order.

    Each line evaluates one of ``decide``'s expressions with ``out=`` buffers; where
    ``decide`` writes ``a + b * c`` this computes ``b * c`` then adds ``a`` (IEEE addition
    and multiplication commute exactly; only regrouping would change bits). Subexpressions
    ``decide`` evaluates twice (``i1 + i2 * c``, ``i3 * B``, ``L - h``, the ratios to the
    targets) are evaluated once here.
    """
    m = end - start
    opt = cols.optional

    def given(name: str, default: Callable[[], FloatArray | float]) -> FloatArray:
        v = opt[name][start:end]
        if name in complete:
            return v
        return np.where(v != v, default(), v)  # NaN: not reported

    L = cols.prompt_len[start:end]
    out = cols.predicted_output_len[start:end]  # O in the docstring
    B = cols.system_load[start:end]
    Bd = cols.decode_batch_size[start:end]
    c = cols.chunk_size[start:end]
    P = given("pending_prefill_tokens", lambda: 0.0)
    Pd = given("decode_pending_prefill_tokens", lambda: 0.0)
    K = given("colloc_context_tokens", lambda: B * L)
    Kd = given("decode_context_tokens", lambda: Bd * L)
    q = given("prefill_queue_requests", lambda: 0.0)
    Q = given("prefill_queue_tokens", lambda: q * L)
    G = given("prefill_pool_gpus", lambda: 1.0)
    r = given("prefill_running_requests", lambda: np.where(q > 0.0, G, 0.0))
    rate_c = given("colloc_prefill_tokens_per_s", lambda: 0.0)
    rate_d = given("decode_prefill_tokens_per_s", lambda: 0.0)
    ttft_slo = given("ttft_slo_ms", lambda: math.inf)
    tpot_slo = given("tpot_slo_ms", lambda: math.inf)
    w = model.harm_weight
    (
        h, half_out, om1, join, u, total, nm1, rest, c_lin, i3B, f_full, step, in_flight,
        raw_c, t_ahead, remote, queue_harm, bd_join, raw_d, ratio_ttft_c, ratio_tpot_c,
        ratio_ttft_d, ratio_tpot_d, sign, v0, v1, v2, v3, t1, t2, t3,
    ) = scratch.floats[:, :m]  # fmt: skip
    busy, mask, ok_c, ok_d, both, by_cost, less, inner, better = scratch.flags[:, :m]
    best, index, lookup = scratch.ints[:, :m]
    n = res.terms["chunk_steps"]
    ttft_c, ttft_d = res.terms["ttft_collocated_ms"], res.terms["ttft_disaggregated_ms"]
    tpot_c, tpot_d = res.terms["tpot_collocated_ms"], res.terms["tpot_disaggregated_ms"]
    e2e_c, e2e_d = res.terms["t_collocated_ms"], res.terms["t_disaggregated_ms"]
    harm_c, harm_d = res.terms["harm_collocated_ms"], res.terms["harm_disaggregated_ms"]
    cost_c, cost_d = res.terms["cost_collocated_ms"], res.terms["cost_disaggregated_ms"]
    backlog, own_c = res.terms["local_backlog_ms"], res.terms["local_prefill_ms"]
    wait, t_prefill = res.terms["prefill_wait_ms"], res.terms["prefill_ms"]
    transfer = res.terms["transfer_ms"]

    np.subtract(L, 1.0, out=t1)
    np.minimum(given("cached_prompt_tokens", lambda: 0.0), t1, out=h)
    np.multiply(out, 0.5, out=half_out)
    np.subtract(out, 1.0, out=om1)
    np.add(L, half_out, out=join)  # join = (O - 1) * (a1 + a2 * (L + O/2))
    join *= model._a2
    join += model._a1
    join *= om1

    # Collocated. f(x, B) = x * ((i1 + i2 * x) + i3 * B); s(B, K) = (a0 + a1 * B) + a2 * K.
    np.subtract(L, h, out=u)
    np.add(P, u, out=total)
    np.divide(total, c, out=n)
    np.ceil(n, out=n)
    np.subtract(n, 1.0, out=nm1)
    np.multiply(nm1, c, out=rest)
    np.subtract(total, rest, out=rest)
    np.multiply(c, model._i2, out=c_lin)
    c_lin += model._i1
    np.multiply(B, model._i3, out=i3B)
    np.add(c_lin, i3B, out=f_full)
    f_full *= c
    np.multiply(B, model._a1, out=step)
    step += model._a0
    np.multiply(K, model._a2, out=t1)
    step += t1
    np.multiply(step, 0.5, out=in_flight)
    # ttft_c = in_flight + n * step + (n - 1) * f(c, B) + f(rest, B), with decodes running
    np.multiply(n, step, out=ttft_c)
    np.add(in_flight, ttft_c, out=ttft_c)
    np.multiply(nm1, f_full, out=t1)
    ttft_c += t1
    np.multiply(rest, model._i2, out=t1)
    t1 += model._i1
    t1 += i3B
    t1 *= rest
    ttft_c += t1
    # Without decodes (few requests): prefill-only steps, nothing in flight.
    np.greater(B, 0.0, out=busy)
    np.logical_not(busy, out=mask)
    idle = np.flatnonzero(mask)
    if idle.size:
        in_flight[idle] = 0.0
        P_idle = P[idle]
        prefill_pending = np.where(P_idle > 0.0, _prefill_many(model, P_idle), 0.0)
        ttft_c[idle] = _prefill_many(model, u[idle]) + prefill_pending
    np.subtract(ttft_c, in_flight, out=backlog)  # in_flight + (ttft_c - in_flight) * (P / total)
    np.divide(P, total, out=t1)
    backlog *= t1
    backlog += in_flight
    np.subtract(ttft_c, backlog, out=own_c)
    _tpot_into(model, B, K, L, half_out, P, c, c_lin, rate_c, tpot_c, t1, t2, t3)
    np.multiply(om1, tpot_c, out=e2e_c)
    e2e_c += ttft_c
    np.multiply(B, u, out=raw_c)  # B * u * f(c, B) / c + B * join
    raw_c *= f_full
    raw_c /= c
    np.multiply(B, join, out=t1)
    raw_c += t1

    # Disaggregated.
    _prefill_into(model, L, t_prefill)
    np.greater(q, 0.0, out=mask)
    t_ahead.fill(0.0)  # a scratch row holds any bits: T_P below must only see numbers
    np.divide(Q, q, out=t_ahead, where=mask)  # elsewhere replaced below
    _prefill_into(model, t_ahead, t_ahead)
    np.logical_not(mask, out=mask)
    np.copyto(t_ahead, t_prefill, where=mask)  # no queue: the mean prefill is this one's
    np.add(G, 1.0, out=t1)  # wait = (t_ahead / (G + 1) if r >= G else 0) + q * t_ahead / G
    np.divide(t_ahead, t1, out=t1)
    np.greater_equal(r, G, out=mask)
    np.multiply(q, t_ahead, out=wait)
    wait /= G
    wait += np.where(mask, t1, 0.0)  # (a masked copy mispredicts on an irregular mask)
    wait *= model.queue_wait_scale  # the calibration's factor (1.0: every bit kept)
    np.multiply(u, model._xfer, out=transfer)  # (L - h) * bytes per token / bandwidth
    np.add(t_prefill, transfer, out=remote)
    np.add(wait, remote, out=ttft_d)
    _tpot_into(model, Bd, Kd, L, half_out, Pd, c, c_lin, rate_d, tpot_d, t1, t2, t3)
    np.multiply(om1, tpot_d, out=e2e_d)
    e2e_d += ttft_d
    np.multiply(q, t_prefill, out=queue_harm)
    queue_harm /= G
    np.multiply(Bd, join, out=bd_join)
    np.add(queue_harm, bd_join, out=raw_d)

    # Harm priced by the victims' pressure; cost; feasibility (the ratios serve both).
    np.divide(ttft_c, ttft_slo, out=ratio_ttft_c)
    np.divide(tpot_c, tpot_slo, out=ratio_tpot_c)
    np.divide(ttft_d, ttft_slo, out=ratio_ttft_d)
    np.divide(tpot_d, tpot_slo, out=ratio_tpot_d)
    tpot_bounded = "tpot_slo_ms" in bounded
    _pressure_into(ratio_tpot_c, tpot_slo, tpot_bounded, harm_c)
    harm_c *= raw_c
    _pressure_into(ratio_ttft_d, ttft_slo, "ttft_slo_ms" in bounded, harm_d)
    harm_d *= queue_harm
    _pressure_into(ratio_tpot_d, tpot_slo, tpot_bounded, t1)
    t1 *= bd_join
    harm_d += t1
    np.multiply(harm_c, w, out=cost_c)
    cost_c += e2e_c
    np.multiply(harm_d, w, out=cost_d)
    cost_d += e2e_d
    np.maximum(ratio_ttft_c, ratio_tpot_c, out=t1)
    np.less_equal(t1, model._feasible, out=ok_c)
    np.maximum(ratio_ttft_d, ratio_tpot_d, out=t1)
    np.less_equal(t1, model._feasible, out=ok_d)
    np.logical_and(ok_c, ok_d, out=both)
    np.logical_or(ok_c, ok_d, out=res.meets_slo)
    np.less(cost_d, cost_c, out=by_cost)
    # Both feasible: by cost; one: that one; neither: less unpriced harm. (Selections
    # between flags and between small integers are arithmetic: no branch per request.)
    np.less(raw_d, raw_c, out=less)
    _select_flags(res.meets_slo, ok_d, less, out=inner)
    _select_flags(both, by_cost, inner, out=res.is_disaggregated)

    # The component favouring the chosen path most; the first of equals, as decide's loop.
    np.multiply(by_cost, 2.0, out=sign)
    sign -= 1.0  # +1 disaggregated, -1 collocated: the chosen path's side of each difference
    np.subtract(backlog, wait, out=v0)
    v0 *= sign
    np.subtract(own_c, remote, out=v1)
    v1 *= sign
    np.subtract(tpot_c, tpot_d, out=v2)
    v2 *= om1
    v2 *= sign
    np.subtract(harm_c, harm_d, out=v3)
    v3 *= w
    v3 *= sign
    _first_max((v0, v1, v2, v3), best, better, index)
    np.multiply(by_cost, _REASON_LOOKUP.shape[1], out=index)
    index += best
    np.take(_REASON_LOOKUP.ravel(), index, out=lookup, mode="wrap")  # in range: unbuffered
    reason = res.reason_index  # lookup if both feasible, else slo_only / slo_none
    np.multiply(res.meets_slo, _SLO_ONLY_INDEX - _SLO_NONE_INDEX, out=reason)
    reason += _SLO_NONE_INDEX
    lookup -= reason
    lookup *= both
    reason += lookup


def _prefill_into(model: QueueAwareModel, tokens: FloatArray, out: FloatArray) -> None:
    """``out = T_P(tokens)``, as ``prefill_ms`` (``out`` may be ``tokens``)."""
    np.subtract(tokens, model._knee, out=out)
    np.maximum(0.0, out, out=out)
    out *= model._p1
    out += model._pf


def _tpot_into(
    model: QueueAwareModel,
    batch: FloatArray,
    context: FloatArray,
    L: FloatArray,
    half_out: FloatArray,
    pending: FloatArray,
    c: FloatArray,
    c_lin: FloatArray,
    rate: FloatArray,
    out: FloatArray,
    t1: FloatArray,
    t2: FloatArray,
    t3: FloatArray,
) -> None:
    """``out = min((s + min(1, P / c) * f) / (1 - rho), s + f)``, ``s = s(B + 1, K + L + O/2)``,
    ``f = f(c, B + 1)``, ``rho = max(0, min(rate * f / c / 1000, f / (s + f)))`` (``c_lin = i1 + i2 * c``;
    ``tpot_ms``)."""
    np.add(batch, 1.0, out=t1)
    np.multiply(t1, model._a1, out=out)
    out += model._a0
    np.add(context, L, out=t2)
    t2 += half_out
    t2 *= model._a2
    out += t2
    t1 *= model._i3
    t1 += c_lin
    t1 *= c
    np.multiply(rate, t1, out=t3)  # rho = max(0, min(rate * f / c / 1000, f / (s + f)))
    t3 /= c
    t3 /= 1000.0
    np.add(out, t1, out=t2)
    np.divide(t1, t2, out=t2)
    np.minimum(t3, t2, out=t3)
    np.maximum(0.0, t3, out=t3)
    np.subtract(1.0, t3, out=t3)
    np.divide(pending, c, out=t2)
    np.minimum(1.0, t2, out=t2)
    t2 *= t1
    t1 += out  # s + f, the bound
    out += t2
    out /= t3
    np.minimum(out, t1, out=out)


def _prefill_many(model: QueueAwareModel, tokens: FloatArray) -> FloatArray:
    """``T_P(tokens)``, as ``prefill_ms``, in a new array."""
    return model._pf + model._p1 * np.maximum(0.0, tokens - model._knee)


class _Scratch:
    """Preallocated intermediates of one block: a row per name in ``_decide_block``."""

    NUM_FLOATS = 31
    NUM_FLAGS = 9
    NUM_INTS = 3

    def __init__(self, size: int) -> None:
        self.floats = np.empty((self.NUM_FLOATS, size))
        self.flags = np.empty((self.NUM_FLAGS, size), dtype=np.bool_)
        self.ints = np.empty((self.NUM_INTS, size), dtype=np.int64)


def _pressure_into(ratio: FloatArray, target_ms: FloatArray, is_bounded: bool, out: FloatArray) -> None:
    """``out = _pressure`` from ``ratio = predicted / target`` (``is_bounded``: no target is inf)."""
    np.minimum(1.0, ratio, out=out)
    if not is_bounded:
        np.copyto(out, 1.0, where=target_ms == math.inf)


def _select_flags(
    mask: npt.NDArray[np.bool_],
    if_true: npt.NDArray[np.bool_],
    if_false: npt.NDArray[np.bool_],
    out: npt.NDArray[np.bool_],
) -> None:
    """``out = np.where(mask, if_true, if_false)`` for flags: ``b ^ (mask & (a ^ b))``."""
    np.logical_xor(if_true, if_false, out=out)
    out &= mask
    out ^= if_false


def _first_max(
    values: tuple[FloatArray, ...],
    best: npt.NDArray[np.int64],
    better: npt.NDArray[np.bool_],
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
