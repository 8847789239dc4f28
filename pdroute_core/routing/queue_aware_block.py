"""The queue-aware model's vectorised evaluation: ``decide`` on many requests, the same bits.

``QueueAwareModel.decide_many`` (``pdroute_core.routing.queue_aware``, whose docstring holds
the formulas) calls ``decide_many`` here. ``_decide_block`` evaluates ``decide``'s operations
in ``decide``'s order on IEEE doubles, with the forms of ``queue_aware_kernels``, so its
answers agree with ``decide``'s bit for bit (a property test checks it); keep that order when
changing either side. Where the bits allow it a block takes a shorter way, chosen per block
from its own inputs: a column reported for every request is read as it is, a target column
without +inf skips the "no target" case, a block without prefill rates skips ``rho``.

Threads: from ``PARALLEL_MIN_REQUESTS`` requests on, the blocks are shared among up to
``block_pool.max_threads()`` threads (the cores this process may use, at most 4) on a pool
that ``block_pool`` makes on the first such call, never at import. numpy releases the GIL in
its loops, so the threads run on separate cores; each has its own scratch and writes only its
blocks' slices of the answers, so the bits do not depend on the number of threads (a test
compares 1, 2 and 3). Smaller inputs stay on the calling thread, with no pool and no thread.
Blocks are 65,536 requests because a thread waiting for the GIL wakes tens of microseconds
late on a small VM: shorter loops leave one thread asleep (``block_pool``). On the 2-core
development VM, 1M requests: 7.3-8.3 million decisions/s on one thread, 10.7-14.6 on two
(README, bench.bench_route).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pdroute_core.routing import block_pool
from pdroute_core.routing.queue_aware_kernels import (
    first_max_of_four,
    prefill_into,
    prefill_many,
    pressure_into,
    reason_into,
    select_flags,
    tpot_into,
)
from pdroute_core.routing.types import FloatArray, RouteColumns

if TYPE_CHECKING:
    from pdroute_core.routing.queue_aware import QueueAwareModel

BLOCK = 65_536  # requests per block of the vectorised evaluation (block_pool: why this large)
PARALLEL_MIN_REQUESTS = 2 * BLOCK  # from here on, the blocks are shared among threads

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


@dataclass(frozen=True)
class Answers:
    """The decisions of many requests, one array per term; a block's are views into them."""

    terms: dict[str, FloatArray]  # every name of TERMS
    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]  # into REASONS


def decide_many(
    model: QueueAwareModel, cols: RouteColumns, *, num_threads: int | None = None, block: int | None = None
) -> Answers:
    """``model.decide`` for every request of ``cols``, vectorised: the same bits.

    Evaluated in blocks of ``block`` requests (default ``BLOCK``), so that the intermediate arrays stay in the
    CPU's cache (several times faster than whole-array passes on a million requests). Every
    intermediate has its own preallocated row of scratch (``_Scratch``) and every term is
    written straight into its result array, so a block allocates little: the rows of an
    idle GPU, two selections, and the defaults of a column reported for some requests only.
    The terms are rows of one array (one allocation, one mapping of fresh pages).

    From ``PARALLEL_MIN_REQUESTS`` requests on, the blocks are shared among ``num_threads``
    threads (default: ``block_pool.max_threads()``, the cores this process may use), each with
    its own scratch (``block_pool``); below, or with ``num_threads=1``, the calling thread does
    all. Each block's answers are the same whichever thread evaluates it.
    """
    n = cols.num_requests
    size = BLOCK if block is None else block
    if size < 1:
        raise ValueError(f"block: expected a positive number of requests, got {block!r}")
    rows = np.empty((len(TERMS), n))
    terms = dict(zip(TERMS, rows, strict=True))
    is_disagg = np.empty(n, dtype=np.bool_)
    meets = np.empty(n, dtype=np.bool_)
    reason = np.empty(n, dtype=np.int64)

    def work(starts: Iterator[int]) -> None:
        scratch = _Scratch(min(n, size))
        for start in starts:
            end = min(start + size, n)
            answers = Answers(
                {name: values[start:end] for name, values in terms.items()},
                is_disagg[start:end],
                meets[start:end],
                reason[start:end],
            )
            _decide_block(model, cols, start, end, scratch, answers)

    if num_threads is None:
        num_threads = block_pool.max_threads() if n >= PARALLEL_MIN_REQUESTS else 1
    block_pool.run_blocks(range(0, n, size), work, num_threads)
    return Answers(terms, is_disagg, meets, reason)


class _Scratch:
    """Preallocated intermediates of one block: a row per name in ``_decide_block``."""

    NUM_FLOATS = 31
    NUM_FLAGS = 10
    NUM_SMALL = 3

    def __init__(self, size: int) -> None:
        self.floats = np.empty((self.NUM_FLOATS, size))
        self.flags = np.empty((self.NUM_FLAGS, size), dtype=np.bool_)
        self.small = np.empty((self.NUM_SMALL, size), dtype=np.uint8)


def _rate(values: FloatArray) -> FloatArray | None:
    """A block's prefill rates, NaN (not reported) read as 0; None when every one is 0."""
    if math.isnan(top := np.fmax.reduce(values)) or (top == 0.0 and np.fmin.reduce(values) == 0.0):
        return None  # (fmax and fmin skip NaN: NaN only when every value is NaN)
    return values if not math.isnan(np.maximum.reduce(values)) else np.where(values != values, 0.0, values)


def _decide_block(
    model: QueueAwareModel, cols: RouteColumns, start: int, end: int, scratch: _Scratch, res: Answers
) -> None:
    """Requests ``start:end`` of ``cols`` into ``res``: ``decide``'s operations, in its order.

    Each line evaluates one of ``decide``'s expressions with ``out=`` buffers; where
    ``decide`` writes ``a + b * c`` this computes ``b * c`` then adds ``a`` (IEEE addition
    and multiplication commute exactly; only regrouping would change bits). Subexpressions
    ``decide`` evaluates twice (``i1 + i2 * c``, ``i3 * B``, ``L - h``, ``s + f``, the ratios
    to the targets) are evaluated once here.
    """
    m = end - start
    opt = cols.optional
    bounded: set[str] = set()  # target columns without +inf in this block

    def given(name: str, default: Callable[[], FloatArray | float]) -> FloatArray:
        v = opt[name][start:end]
        top = np.maximum.reduce(v)  # NaN when the block holds one (not reported), else +inf if held
        if math.isnan(top):
            return np.where(v != v, default(), v)
        if math.isfinite(top):
            bounded.add(name)
        return v

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
    ttft_slo = given("ttft_slo_ms", lambda: math.inf)
    tpot_slo = given("tpot_slo_ms", lambda: math.inf)
    w = model.harm_weight
    (
        h, half_out, om1, join, u, total, nm1, rest, c_lin, i3B, f_full, step, in_flight,
        raw_c, t_ahead, remote, queue_harm, bd_join, ratio_ttft_c, ratio_tpot_c,
        ratio_ttft_d, ratio_tpot_d, sign, v0, v1, v2, v3, m01, m23, steps, left,
    ) = scratch.floats[:, :m]  # fmt: skip
    t1, t2, t3, t4 = ratio_ttft_c, ratio_tpot_c, ratio_ttft_d, ratio_tpot_d  # free until the ratios
    busy, mask, ok_c, ok_d, both, by_cost, less, inner, f1, f2 = scratch.flags[:, :m]
    best, code, tmp = scratch.small[:, :m]
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
        prefill_pending = np.where(P_idle > 0.0, prefill_many(model, P_idle), 0.0)
        ttft_c[idle] = prefill_many(model, u[idle]) + prefill_pending
    np.subtract(ttft_c, in_flight, out=backlog)  # in_flight + (ttft_c - in_flight) * (P / total)
    np.divide(P, total, out=t1)
    backlog *= t1
    backlog += in_flight
    np.subtract(ttft_c, backlog, out=own_c)
    rate_c = _rate(opt["colloc_prefill_tokens_per_s"][start:end])
    # The prompts pending here are prefilled before this one: none of its decode steps.
    tpot_into(model, B, K, L, half_out, 0.0, c, c_lin, rate_c, tpot_c, (t1, t2, t3, t4))
    np.multiply(om1, tpot_c, out=e2e_c)
    e2e_c += ttft_c
    np.multiply(B, u, out=raw_c)  # B * u * f(c, B) / c + B * join
    raw_c *= f_full
    raw_c /= c
    np.multiply(B, join, out=t1)
    raw_c += t1

    # Disaggregated.
    prefill_into(model, L, t_prefill)
    with np.errstate(divide="ignore", invalid="ignore"):  # q = 0: replaced below
        np.divide(Q, q, out=t_ahead)
        prefill_into(model, t_ahead, t_ahead)
    np.greater(q, 0.0, out=mask)
    ahead = np.where(mask, t_ahead, t_prefill)  # no queue: the mean prefill is this one's
    running = opt["prefill_running_tokens"][start:end]
    if not math.isnan(np.fmax.reduce(running)):  # t_run = T_P(Y / r) where Y is reported and r > 0
        with np.errstate(divide="ignore", invalid="ignore"):  # r = 0 or Y NaN: not taken
            np.divide(running, r, out=t2)
        prefill_into(model, t2, t2)
        np.equal(running, running, out=f1)
        np.greater(r, 0.0, out=mask)
        mask &= f1
        ahead_run = np.where(mask, t2, ahead)
    else:
        ahead_run = ahead  # no running length reported: the mean prefill ahead, as before
    np.add(G, 1.0, out=t1)  # wait = (t_run / (G + 1) if r >= G else 0) + q * t_ahead / G
    np.divide(ahead_run, t1, out=t1)
    np.greater_equal(r, G, out=mask)
    np.multiply(q, ahead, out=wait)
    wait /= G
    wait += np.where(mask, t1, 0.0)  # (a masked copy mispredicts on an irregular mask)
    if model.queue_wait_scale != 1.0:  # the calibration's factor (x * 1.0 is x: skipped)
        wait *= model.queue_wait_scale
    np.multiply(u, model._xfer, out=transfer)  # (L - h) * bytes per token / bandwidth
    np.add(t_prefill, transfer, out=remote)
    np.add(wait, remote, out=ttft_d)
    rate_d = _rate(opt["decode_prefill_tokens_per_s"][start:end])
    np.maximum(1.0, om1, out=steps)  # D = max(1, O - 1): the decode steps sharing what is left of Pd
    drain = (Pd, ttft_d, steps, left)
    tpot_into(model, Bd, Kd, L, half_out, 0.0, c, c_lin, rate_d, tpot_d, (t1, t2, t3, t4), drain)
    np.multiply(om1, tpot_d, out=e2e_d)
    e2e_d += ttft_d
    np.multiply(q, t_prefill, out=queue_harm)
    queue_harm /= G
    np.multiply(Bd, join, out=bd_join)

    # Harm priced by the victims' pressure; cost; feasibility (the ratios serve both).
    np.divide(ttft_c, ttft_slo, out=ratio_ttft_c)
    np.divide(tpot_c, tpot_slo, out=ratio_tpot_c)
    np.divide(ttft_d, ttft_slo, out=ratio_ttft_d)
    np.divide(tpot_d, tpot_slo, out=ratio_tpot_d)
    tpot_bounded = "tpot_slo_ms" in bounded
    pressure_into(ratio_tpot_c, tpot_slo, tpot_bounded, harm_c)
    harm_c *= raw_c
    pressure_into(ratio_ttft_d, ttft_slo, "ttft_slo_ms" in bounded, harm_d)
    harm_d *= queue_harm
    pressure_into(ratio_tpot_d, tpot_slo, tpot_bounded, v0)
    v0 *= bd_join
    harm_d += v0
    np.multiply(harm_c, w, out=cost_c)
    cost_c += e2e_c
    np.multiply(harm_d, w, out=cost_d)
    cost_d += e2e_d
    np.maximum(ratio_ttft_c, ratio_tpot_c, out=v0)
    np.less_equal(v0, model._feasible, out=ok_c)
    np.maximum(ratio_ttft_d, ratio_tpot_d, out=v0)
    np.less_equal(v0, model._feasible, out=ok_d)
    np.logical_and(ok_c, ok_d, out=both)
    np.logical_or(ok_c, ok_d, out=res.meets_slo)
    np.less(cost_d, cost_c, out=by_cost)
    # Costs within the margin of each other: the lower TTFT (decide's band, the same operations).
    np.subtract(cost_d, cost_c, out=v0)
    np.abs(v0, out=v0)
    np.minimum(cost_c, cost_d, out=v1)
    v1 *= model.slo_margin
    np.less_equal(v0, v1, out=f1)
    np.less(ttft_d, ttft_c, out=f2)
    select_flags(f1, f2, by_cost, out=less)  # (less: free until just below)
    by_cost[...] = less
    # Neither feasible: the path that uses less of others' target budgets (decide's order):
    # budget_c = B * (u f / (c D) + slower) / tpot_slo; budget_d = q T_P(L) / (G ttft_slo)
    # + B' slower / tpot_slo; slower = a1 + a2 (L + O/2); D = max(1, O - 1) (``steps``).
    np.add(L, half_out, out=v1)
    v1 *= model._a2
    v1 += model._a1  # slower
    np.multiply(u, f_full, out=v0)
    np.multiply(c, steps, out=v2)
    v0 /= v2
    v0 += v1
    v0 *= B
    v0 /= tpot_slo  # budget_c
    np.multiply(q, t_prefill, out=v2)
    np.multiply(G, ttft_slo, out=v3)
    v2 /= v3
    v1 *= Bd
    v1 /= tpot_slo
    v2 += v1  # budget_d
    # Both feasible: by cost; one: that one; neither: the smaller budget. (Selections between
    # flags are arithmetic: no branch per request.)
    np.less(v2, v0, out=less)
    select_flags(res.meets_slo, ok_d, less, out=inner)
    select_flags(both, by_cost, inner, out=res.is_disaggregated)

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
    first_max_of_four((v0, v1, v2, v3), best, (m01, m23), (f1, f2, mask))
    reason_into(best, by_cost, res.meets_slo, both, code, tmp, res.reason_index)
