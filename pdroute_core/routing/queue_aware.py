"""The queue-, harm- and SLO-aware decision model.

It predicts, for both paths, the request's own TTFT, TPOT and end-to-end latency and the
harm the path does to other requests, then decides on ``own e2e + w * harm`` under the
request's TTFT/TPOT targets. Step-time forms (``pdroute_core.queue_params``, fitted from the profile
by ``solver.fit_queue``)::

    T_P(u)  = prefill_floor + prefill_per_token * max(0, u - knee)      a prefill of u tokens
    s(B, K) = decode_base + decode_per_seq * B + decode_per_ctx * K     a decode step
    f(c, B) = c * (chunk_per_token + chunk_per_token_sq * c + chunk_per_token_seq * B)

Inputs (``RouteInputs``): L prompt, O predicted output, B / K decodes and their context on the
collocation GPU, B' / K' on the decode GPU, c chunk, P prompt tokens pending prefill on the
collocation GPU, h cached prompt tokens, the prefill pool's q waiting requests holding Q
tokens, r running prefills and G GPUs.

Collocated (the prompt is prefilled in chunks between the running decodes, after P)::

    u = L - h;  n = ceil((P + u) / c);  rest = P + u - (n - 1) * c
    TTFT_c = n * s(B, K) + (n - 1) * f(c, B) + f(rest, B)     if B > 0   (each chunk costs a whole step)
           = T_P(u) + T_P(P) [if P > 0]                        if B = 0   (prefill-only steps)
    TPOT_c = s(B + 1, K + L + O/2)
    harm_c = B * u * f(c, B) / c  +  B * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

The first harm term is what the running decodes wait for this prompt's chunks: every chunk
step is longer by f for each of them. The second is the slower decode step they share once
this request decodes beside them.

Disaggregated (a prefill GPU, then the KV cache over the link)::

    t = T_P(Q / q) if q > 0 else T_P(L)                        mean prefill ahead
    W = t / (G + 1) [if r >= G]  +  q * t / G                   wait for a prefill GPU
    TTFT_d = W + T_P(L) + (L - h) * bytes_per_token / bandwidth
    TPOT_d = s(B' + 1, K' + L + O/2)
    harm_d = q * T_P(L) / G  +  B' * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

When every prefill GPU is busy, the first frees after about ``t / (G + 1)`` (the least of G
residual service times), then the queue drains G at a time. The first harm term prices the
requests that will queue behind this prefill: as many as wait now, each ``T_P(L) / G`` later.

Harm is priced by how close its victims run to their targets: the running decodes' share by
``min(1, TPOT / tpot_slo)`` of the GPU they share, the queued prefills' share by
``min(1, TTFT_d / ttft_slo)``; without a target the factor is 1 (plain total latency).

Decision: with ``J = E2E + w * harm``, a path is feasible when its predicted TTFT and TPOT
stay within ``(1 - slo_margin)`` of the request's targets (the margin absorbs the prediction's
own error: without it, queues settle right at the target and half their requests miss it).
One feasible path wins; with both, the smaller ``J`` (ties collocate). With neither, the
request cannot make its targets, ``meets_slo`` is false (the gateway may shed it), and it goes
where its unpriced harm to others is smaller (ties collocate): it is late either way, so it
should not also make others late. The reason code names the component that favoured the
chosen path most (see ``REASONS``).

Defaults chosen in the simulator (docs/decision-model.md): ``w = 0`` (at the usual targets
any harm weight only moves latency into the tail; with a tight TPOT target ``w = 1`` keeps
more goodput) and ``slo_margin = 0.1``.

Defaults for inputs not reported (listed in the answer's ``assumed``): no prefill queue
(q = 0, Q = q * L, r = G if q > 0 else 0, G = 1), nothing pending locally (P = 0), running
decodes with this prompt's context (K = B * L, K' = B' * L), no prefix hit (h = 0), no
targets. ``decide`` and ``decide_many`` evaluate the same operations in the same order on IEEE
doubles, so their answers agree bit for bit (a property test checks it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pdroute_core.params import CostModelParams
from pdroute_core.queue_params import QueueAwareParams
from pdroute_core.routing.types import (
    COLLOCATED,
    DISAGGREGATED,
    OPTIONAL_INPUTS,
    Decision,
    FloatArray,
    RouteColumns,
    RouteInputs,
)

NAME = "queue-aware"
DEFAULT_HARM_WEIGHT = 0.0
DEFAULT_SLO_MARGIN = 0.1

REASON_SLO_ONLY = "slo_only_feasible"  # only the chosen path meets the targets
REASON_SLO_NONE = "slo_none_feasible"  # neither does: sent where it blocks no feasible request
REASON_PREFILL_QUEUE = "prefill_queue"  # collocated: the prefill pool's wait
REASON_LOCAL_BACKLOG = "local_backlog"  # disaggregated: prompts already pending on the GPU
REASON_LOCAL_FASTER = "local_prefill_faster"  # collocated: chunks cost less than prefill + transfer
REASON_REMOTE_FASTER = "remote_prefill_faster"  # disaggregated: prefill + transfer cost less than chunks
REASON_DECODE = "decode_faster"  # the decode phase differs most (different GPUs)
REASON_HARM = "less_harm"  # the harm to other requests decided
REASONS = (
    REASON_SLO_ONLY,
    REASON_SLO_NONE,
    REASON_PREFILL_QUEUE,
    REASON_LOCAL_BACKLOG,
    REASON_LOCAL_FASTER,
    REASON_REMOTE_FASTER,
    REASON_DECODE,
    REASON_HARM,
)
# Index of the component favouring the chosen path most -> reason, per chosen path.
_COMPONENT_REASON = {
    COLLOCATED: (REASON_PREFILL_QUEUE, REASON_LOCAL_FASTER, REASON_DECODE, REASON_HARM),
    DISAGGREGATED: (REASON_LOCAL_BACKLOG, REASON_REMOTE_FASTER, REASON_DECODE, REASON_HARM),
}


@dataclass(frozen=True)
class QueueAwareBreakdown:
    """One decision of the queue-aware model with every term (ms unless named otherwise)."""

    decision: Decision
    reason: str
    t_collocated_ms: float  # predicted end-to-end latency, collocated
    t_disaggregated_ms: float  # predicted end-to-end latency, disaggregated
    assumed: tuple[str, ...]  # optional inputs not reported, taken at their defaults
    meets_slo: bool  # the chosen path is predicted to meet the request's targets
    ttft_collocated_ms: float
    ttft_disaggregated_ms: float
    tpot_collocated_ms: float
    tpot_disaggregated_ms: float
    local_backlog_ms: float  # collocated TTFT share spent on prompts pending ahead
    local_prefill_ms: float  # collocated TTFT share spent on this prompt's chunks
    chunk_steps: float  # engine steps until the collocated prefill completes
    prefill_wait_ms: float  # disaggregated: wait for a prefill GPU
    prefill_ms: float  # disaggregated: the prefill itself
    transfer_ms: float  # disaggregated: the KV-cache transfer
    harm_collocated_ms: float  # delay the collocated path adds to other requests
    harm_disaggregated_ms: float  # delay the disaggregated path adds to other requests
    harm_weight: float  # w
    cost_collocated_ms: float  # e2e + w * harm
    cost_disaggregated_ms: float

    @property
    def chosen_ttft_ms(self) -> float:
        """Predicted time to first token of the chosen path (ms)."""
        return self.ttft_disaggregated_ms if self.decision == DISAGGREGATED else self.ttft_collocated_ms

    @property
    def chosen_e2e_ms(self) -> float:
        """Predicted end-to-end latency of the chosen path (ms)."""
        return self.t_disaggregated_ms if self.decision == DISAGGREGATED else self.t_collocated_ms


BLOCK = 8192  # requests per block of the vectorised evaluation

_ARRAY_TERMS = (
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


def _pressure(predicted_ms: float, target_ms: float) -> float:
    """How close a request runs to its target, at most 1; 1 without a target."""
    return 1.0 if target_ms == math.inf else min(1.0, predicted_ms / target_ms)


# Reason index in REASONS by (chosen path: 0 collocated, 1 disaggregated, component).
_REASON_LOOKUP = np.array(
    [[REASONS.index(name) for name in _COMPONENT_REASON[path]] for path in (COLLOCATED, DISAGGREGATED)]
)
_SLO_ONLY_INDEX = REASONS.index(REASON_SLO_ONLY)
_SLO_NONE_INDEX = REASONS.index(REASON_SLO_NONE)


@dataclass(frozen=True)
class QueueAwareBatch:
    """Vectorised decisions: one array per term of ``QueueAwareBreakdown``."""

    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]  # into REASONS
    optional: dict[str, FloatArray]  # the request's optional inputs (NaN: not reported)
    harm_weight: float
    terms: dict[str, FloatArray]  # every name of _ARRAY_TERMS

    def decisions(self) -> list[Decision]:
        return [DISAGGREGATED if d else COLLOCATED for d in self.is_disaggregated.tolist()]

    def rows(self) -> list[QueueAwareBreakdown]:
        """One breakdown per request, equal to ``decide``'s for the same inputs."""
        missing_cols = np.stack([np.isnan(self.optional[name]) for name in OPTIONAL_INPUTS]).T.tolist()
        columns = [self.terms[name].tolist() for name in _ARRAY_TERMS]
        out = []
        for i, (d, ok, reason, miss) in enumerate(
            zip(
                self.is_disaggregated.tolist(),
                self.meets_slo.tolist(),
                self.reason_index.tolist(),
                missing_cols,
                strict=True,
            )
        ):
            out.append(
                QueueAwareBreakdown(
                    decision=DISAGGREGATED if d else COLLOCATED,
                    reason=REASONS[reason],
                    assumed=tuple(n for n, m in zip(OPTIONAL_INPUTS, miss, strict=True) if m),
                    meets_slo=ok,
                    harm_weight=self.harm_weight,
                    **{name: col[i] for name, col in zip(_ARRAY_TERMS, columns, strict=True)},
                )
            )
        return out


class QueueAwareModel:
    """The queue-, harm- and SLO-aware model (module docstring) on fitted ``QueueAwareParams``."""

    name = NAME
    reasons = REASONS

    def __init__(
        self,
        params: CostModelParams,
        harm_weight: float = DEFAULT_HARM_WEIGHT,
        slo_margin: float = DEFAULT_SLO_MARGIN,
        queue_wait_scale: float = 1.0,
    ) -> None:
        if params.queue_aware is None:
            raise ValueError("these params carry no queue-aware forms (schema version 1)")
        if not (math.isfinite(harm_weight) and harm_weight >= 0):
            raise ValueError(f"harm_weight: expected a finite number >= 0, got {harm_weight!r}")
        if not (math.isfinite(slo_margin) and 0 <= slo_margin < 1):
            raise ValueError(f"slo_margin: expected a number in [0, 1), got {slo_margin!r}")
        if not (math.isfinite(queue_wait_scale) and queue_wait_scale > 0):
            raise ValueError(f"queue_wait_scale: expected a finite number > 0, got {queue_wait_scale!r}")
        self.params = params
        # The online calibration's factor on the prefill wait (pdroute_core.calibration); x * 1.0 == x
        # exactly, so at the default every answer keeps its bits.
        self.queue_wait_scale = float(queue_wait_scale)
        q: QueueAwareParams = params.queue_aware
        self.harm_weight = float(harm_weight)
        self.slo_margin = float(slo_margin)
        self._feasible = 1.0 - self.slo_margin  # the largest lateness that counts as meeting a target
        self._pf = float(q.prefill_floor_ms)
        self._p1 = float(q.prefill_ms_per_token)
        self._knee = float(q.prefill_knee_tokens)
        self._a0 = float(q.decode_base_ms)
        self._a1 = float(q.decode_ms_per_seq)
        self._a2 = float(q.decode_ms_per_context_token)
        self._i1 = float(q.chunk_ms_per_token)
        self._i2 = float(q.chunk_ms_per_token_sq)
        self._i3 = float(q.chunk_ms_per_token_seq)
        self._xfer = float(params.bytes_per_token) / (float(params.bandwidth_GBps) * 1e6)

    # --- the forms (scalar) -------------------------------------------------------------------
    def prefill_ms(self, tokens: float) -> float:
        """``T_P(u)``: a prefill of ``tokens`` prompt tokens on an idle GPU (ms)."""
        return self._pf + self._p1 * max(0.0, tokens - self._knee)

    def step_ms(self, batch: float, context_tokens: float) -> float:
        """``s(B, K)``: one decode step of ``batch`` sequences holding ``context_tokens`` (ms)."""
        return self._a0 + self._a1 * batch + self._a2 * context_tokens

    def chunk_ms(self, chunk: float, batch: float) -> float:
        """``f(c, B)``: what ``chunk`` prefill tokens add to a step of ``batch`` decodes (ms)."""
        return chunk * (self._i1 + self._i2 * chunk + self._i3 * batch)

    # --- one request --------------------------------------------------------------------------
    def decide(self, x: RouteInputs) -> QueueAwareBreakdown:
        """The decision with every term (module docstring)."""
        L = float(x.prompt_len)
        out = float(x.predicted_output_len)  # O in the docstring
        B = float(x.system_load)
        Bd = float(x.decode_batch_size)
        c = float(x.chunk_size)
        h = 0.0 if x.cached_prompt_tokens is None else min(float(x.cached_prompt_tokens), L - 1.0)
        P = 0.0 if x.pending_prefill_tokens is None else float(x.pending_prefill_tokens)
        Pd = 0.0 if x.decode_pending_prefill_tokens is None else float(x.decode_pending_prefill_tokens)
        K = B * L if x.colloc_context_tokens is None else float(x.colloc_context_tokens)
        Kd = Bd * L if x.decode_context_tokens is None else float(x.decode_context_tokens)
        q = 0.0 if x.prefill_queue_requests is None else float(x.prefill_queue_requests)
        Q = q * L if x.prefill_queue_tokens is None else float(x.prefill_queue_tokens)
        G = 1.0 if x.prefill_pool_gpus is None else float(x.prefill_pool_gpus)
        if x.prefill_running_requests is None:
            r = G if q > 0.0 else 0.0
        else:
            r = float(x.prefill_running_requests)
        ttft_slo = math.inf if x.ttft_slo_ms is None else float(x.ttft_slo_ms)
        tpot_slo = math.inf if x.tpot_slo_ms is None else float(x.tpot_slo_ms)
        w = self.harm_weight
        half_out = 0.5 * out
        join = (out - 1.0) * (self._a1 + self._a2 * (L + half_out))

        # Collocated.
        u = L - h
        total = P + u
        n = math.ceil(total / c)
        rest = total - (n - 1.0) * c
        f_full = self.chunk_ms(c, B)
        if B > 0.0:
            step = self.step_ms(B, K)
            in_flight = 0.5 * step
            ttft_c = in_flight + n * step + (n - 1.0) * f_full + self.chunk_ms(rest, B)
        else:
            in_flight = 0.0
            ttft_c = self.prefill_ms(u) + (self.prefill_ms(P) if P > 0.0 else 0.0)
        backlog = in_flight + (ttft_c - in_flight) * (P / total)
        own_c = ttft_c - backlog
        tpot_c = self.step_ms(B + 1.0, K + L + half_out) + min(1.0, P / c) * self.chunk_ms(c, B + 1.0)
        e2e_c = ttft_c + (out - 1.0) * tpot_c
        raw_harm_c = B * u * f_full / c + B * join

        # Disaggregated.
        t_prefill = self.prefill_ms(L)
        t_ahead = self.prefill_ms(Q / q) if q > 0.0 else t_prefill
        wait = ((t_ahead / (G + 1.0) if r >= G else 0.0) + q * t_ahead / G) * self.queue_wait_scale
        transfer = (L - h) * self._xfer
        remote = t_prefill + transfer
        ttft_d = wait + remote
        tpot_d = self.step_ms(Bd + 1.0, Kd + L + half_out) + min(1.0, Pd / c) * self.chunk_ms(c, Bd + 1.0)
        e2e_d = ttft_d + (out - 1.0) * tpot_d
        queue_harm = q * t_prefill / G
        raw_harm_d = queue_harm + Bd * join
        # Harm is priced by how close its victims run to their targets (1 without a target).
        harm_c = _pressure(tpot_c, tpot_slo) * raw_harm_c
        harm_d = _pressure(ttft_d, ttft_slo) * queue_harm + _pressure(tpot_d, tpot_slo) * (Bd * join)

        cost_c = e2e_c + w * harm_c
        cost_d = e2e_d + w * harm_d
        late_c = max(ttft_c / ttft_slo, tpot_c / tpot_slo)
        late_d = max(ttft_d / ttft_slo, tpot_d / tpot_slo)
        ok_c, ok_d = late_c <= self._feasible, late_d <= self._feasible
        if ok_c and ok_d:
            is_disagg = cost_d < cost_c
            diffs = (
                (
                    backlog - wait,
                    own_c - remote,
                    (out - 1.0) * (tpot_c - tpot_d),
                    w * (harm_c - harm_d),
                )
                if is_disagg
                else (
                    wait - backlog,
                    remote - own_c,
                    (out - 1.0) * (tpot_d - tpot_c),
                    w * (harm_d - harm_c),
                )
            )
            best = 0
            for k in range(1, 4):
                if diffs[k] > diffs[best]:
                    best = k
            reason = _COMPONENT_REASON[DISAGGREGATED if is_disagg else COLLOCATED][best]
            meets = True
        elif ok_c or ok_d:
            is_disagg, reason, meets = ok_d, REASON_SLO_ONLY, True
        else:
            is_disagg, reason, meets = raw_harm_d < raw_harm_c, REASON_SLO_NONE, False
        return QueueAwareBreakdown(
            decision=DISAGGREGATED if is_disagg else COLLOCATED,
            reason=reason,
            t_collocated_ms=e2e_c,
            t_disaggregated_ms=e2e_d,
            assumed=x.missing(),
            meets_slo=meets,
            ttft_collocated_ms=ttft_c,
            ttft_disaggregated_ms=ttft_d,
            tpot_collocated_ms=tpot_c,
            tpot_disaggregated_ms=tpot_d,
            local_backlog_ms=backlog,
            local_prefill_ms=own_c,
            chunk_steps=float(n),
            prefill_wait_ms=wait,
            prefill_ms=t_prefill,
            transfer_ms=transfer,
            harm_collocated_ms=harm_c,
            harm_disaggregated_ms=harm_d,
            harm_weight=w,
            cost_collocated_ms=cost_c,
            cost_disaggregated_ms=cost_d,
        )

    # --- many requests ------------------------------------------------------------------------
    def decide_many(self, cols: RouteColumns) -> QueueAwareBatch:
        """``decide`` for every request of ``cols``, vectorised: the same bits.

        Evaluated in blocks of ``BLOCK`` requests, so that the intermediate arrays stay in the
        CPU's cache (several times faster than whole-array passes on a million requests). Every
        intermediate has its own preallocated row of scratch (``_Scratch``) and every term is
        written straight into its result array, so a block allocates little: the rows of an
        idle GPU, one selection, and the defaults of a column reported for some requests only.
        """
        n = cols.num_requests
        terms = {name: np.empty(n) for name in _ARRAY_TERMS}
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
            block = _BlockOut(
                {name: values[start:end] for name, values in terms.items()},
                is_disagg[start:end],
                meets[start:end],
                reason[start:end],
            )
            self._decide_block(cols, start, end, complete, bounded, scratch, block)
        return QueueAwareBatch(
            is_disaggregated=is_disagg,
            meets_slo=meets,
            reason_index=reason,
            optional=cols.optional,
            harm_weight=self.harm_weight,
            terms=terms,
        )

    def _prefill_into(self, tokens: FloatArray, out: FloatArray) -> None:
        """``out = T_P(tokens)``, as ``prefill_ms`` (``out`` may be ``tokens``)."""
        np.subtract(tokens, self._knee, out=out)
        np.maximum(0.0, out, out=out)
        out *= self._p1
        out += self._pf

    def _decide_block(
        self,
        cols: RouteColumns,
        start: int,
        end: int,
        complete: frozenset[str],
        bounded: frozenset[str],
        scratch: _Scratch,
        res: _BlockOut,
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
        ttft_slo = given("ttft_slo_ms", lambda: math.inf)
        tpot_slo = given("tpot_slo_ms", lambda: math.inf)
        w = self.harm_weight
        (
            h, half_out, om1, join, u, total, nm1, rest, c_lin, i3B, f_full, step, in_flight,
            raw_c, t_ahead, remote, queue_harm, bd_join, raw_d, ratio_ttft_c, ratio_tpot_c,
            ratio_ttft_d, ratio_tpot_d, sign, v0, v1, v2, v3, t1, t2,
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
        join *= self._a2
        join += self._a1
        join *= om1

        # Collocated. f(x, B) = x * ((i1 + i2 * x) + i3 * B); s(B, K) = (a0 + a1 * B) + a2 * K.
        np.subtract(L, h, out=u)
        np.add(P, u, out=total)
        np.divide(total, c, out=n)
        np.ceil(n, out=n)
        np.subtract(n, 1.0, out=nm1)
        np.multiply(nm1, c, out=rest)
        np.subtract(total, rest, out=rest)
        np.multiply(c, self._i2, out=c_lin)
        c_lin += self._i1
        np.multiply(B, self._i3, out=i3B)
        np.add(c_lin, i3B, out=f_full)
        f_full *= c
        np.multiply(B, self._a1, out=step)
        step += self._a0
        np.multiply(K, self._a2, out=t1)
        step += t1
        np.multiply(step, 0.5, out=in_flight)
        # ttft_c = in_flight + n * step + (n - 1) * f(c, B) + f(rest, B), with decodes running
        np.multiply(n, step, out=ttft_c)
        np.add(in_flight, ttft_c, out=ttft_c)
        np.multiply(nm1, f_full, out=t1)
        ttft_c += t1
        np.multiply(rest, self._i2, out=t1)
        t1 += self._i1
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
            prefill_pending = np.where(P_idle > 0.0, self._prefill_many(P_idle), 0.0)
            ttft_c[idle] = self._prefill_many(u[idle]) + prefill_pending
        np.subtract(ttft_c, in_flight, out=backlog)  # in_flight + (ttft_c - in_flight) * (P / total)
        np.divide(P, total, out=t1)
        backlog *= t1
        backlog += in_flight
        np.subtract(ttft_c, backlog, out=own_c)
        self._tpot_into(B, K, L, half_out, P, c, c_lin, tpot_c, t1, t2)
        np.multiply(om1, tpot_c, out=e2e_c)
        e2e_c += ttft_c
        np.multiply(B, u, out=raw_c)  # B * u * f(c, B) / c + B * join
        raw_c *= f_full
        raw_c /= c
        np.multiply(B, join, out=t1)
        raw_c += t1

        # Disaggregated.
        self._prefill_into(L, t_prefill)
        np.greater(q, 0.0, out=mask)
        t_ahead.fill(0.0)  # a scratch row holds any bits: T_P below must only see numbers
        np.divide(Q, q, out=t_ahead, where=mask)  # elsewhere replaced below
        self._prefill_into(t_ahead, t_ahead)
        np.logical_not(mask, out=mask)
        np.copyto(t_ahead, t_prefill, where=mask)  # no queue: the mean prefill is this one's
        np.add(G, 1.0, out=t1)  # wait = (t_ahead / (G + 1) if r >= G else 0) + q * t_ahead / G
        np.divide(t_ahead, t1, out=t1)
        np.greater_equal(r, G, out=mask)
        np.multiply(q, t_ahead, out=wait)
        wait /= G
        wait += np.where(mask, t1, 0.0)  # (a masked copy mispredicts on an irregular mask)
        wait *= self.queue_wait_scale  # the calibration's factor (1.0: every bit kept)
        np.multiply(u, self._xfer, out=transfer)  # (L - h) * bytes per token / bandwidth
        np.add(t_prefill, transfer, out=remote)
        np.add(wait, remote, out=ttft_d)
        self._tpot_into(Bd, Kd, L, half_out, Pd, c, c_lin, tpot_d, t1, t2)
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
        np.less_equal(t1, self._feasible, out=ok_c)
        np.maximum(ratio_ttft_d, ratio_tpot_d, out=t1)
        np.less_equal(t1, self._feasible, out=ok_d)
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

    def _tpot_into(
        self,
        batch: FloatArray,
        context: FloatArray,
        L: FloatArray,
        half_out: FloatArray,
        pending: FloatArray,
        c: FloatArray,
        c_lin: FloatArray,
        out: FloatArray,
        t1: FloatArray,
        t2: FloatArray,
    ) -> None:
        """``out = s(B + 1, K + L + O/2) + min(1, P / c) * f(c, B + 1)`` (``c_lin = i1 + i2 * c``)."""
        np.add(batch, 1.0, out=t1)
        np.multiply(t1, self._a1, out=out)
        out += self._a0
        np.add(context, L, out=t2)
        t2 += half_out
        t2 *= self._a2
        out += t2
        t1 *= self._i3
        t1 += c_lin
        t1 *= c
        np.divide(pending, c, out=t2)
        np.minimum(1.0, t2, out=t2)
        t2 *= t1
        out += t2

    def _prefill_many(self, tokens: FloatArray) -> FloatArray:
        return self._pf + self._p1 * np.maximum(0.0, tokens - self._knee)


@dataclass(frozen=True)
class _BlockOut:
    """Where one block's answers go: views into ``decide_many``'s result arrays."""

    terms: dict[str, FloatArray]
    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]


class _Scratch:
    """Preallocated intermediates of one block: a row per name in ``_decide_block``."""

    NUM_FLOATS = 30
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
