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
collocation GPU (P' on the decode GPU), R / R' the prompt tokens per second prefilled there
recently (``prefill_share``: the stretch of a decode step by later prompts' chunks), h cached
prompt tokens, the prefill pool's q waiting requests holding Q
tokens, r running prefills holding Y prompt tokens (``prefill_running_tokens``) and G GPUs.

Collocated (the prompt is prefilled in chunks between the running decodes, after P)::

    u = L - h;  n = ceil((P + u) / c);  rest = P + u - (n - 1) * c
    TTFT_c = n * s(B, K) + (n - 1) * f(c, B) + f(rest, B)     if B > 0   (each chunk costs a whole step)
           = T_P(u) + T_P(P) [if P > 0]                        if B = 0   (prefill-only steps)
    TPOT_c = min(s / (1 - rho), s + f)                         s = s(B + 1, K + L + O/2), f = f(c, B + 1)
    rho    = max(0, min(R * f / c / 1000, f / (s + f)))         R: recent prefill rate (tokens/s)
    harm_c = B * u * f(c, B) / c  +  B * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

The P tokens pending here are queued ahead of this prompt (FCFS chunked prefill): they are all
prefilled before its first token, so none of its decode steps carries their chunks (later
prompts stay in ``rho``). The first harm term is what the running decodes wait for this
prompt's chunks: every chunk step is longer by f for each of them. The second is the slower
decode step they share once this request decodes beside them.

Disaggregated (a prefill GPU, then the KV cache over the link)::

    t = T_P(Q / q) if q > 0 else T_P(L)                        mean prefill ahead
    t_run = T_P(Y / r) if Y is reported and r > 0 else t       the prefills in progress
    W = t_run / (G + 1) [if r >= G]  +  q * t / G               wait for a prefill GPU
    TTFT_d = W + T_P(L) + (L - h) * bytes_per_token / bandwidth
    P_left = max(0, P' - c * TTFT_d / (s' + f'))       s' = s(B' + 1, K' + L + O/2), f' = f(c, B' + 1)
    TPOT_d = min((s' + min(1, P_left / D / c) * f') / (1 - rho'), s' + f')     D = max(1, O - 1)
    harm_d = q * T_P(L) / G  +  B' * (O - 1) * (decode_per_seq + decode_per_ctx * (L + O/2))

When every prefill GPU is busy, the first frees after about ``t_run / (G + 1)`` (the least of G
residual service times), then the queue drains G at a time. Running prefills are size-biased
(a long prompt is more likely the one in progress), so their own mean length predicts the
residual better than the queue's; without Y the wait is the form with ``t``, bit for bit.
The request reaches the decode GPU after TTFT_d, by when that GPU has run about
``TTFT_d / (s' + f')`` steps, each prefilling c of its P' pending tokens; the P_left / c
chunk steps left fall among the request's D decode steps (with later arrivals at rate R',
``T = (D s' + f' P_left / c) / (1 - rho')``, capped at ``s' + f'`` a step). The first harm
term prices the requests that will queue behind this prefill: as many as wait now, each
``T_P(L) / G`` later.

Harm is priced by how close its victims run to their targets: the running decodes' share by
``min(1, TPOT / tpot_slo)`` of the GPU they share, the queued prefills' share by
``min(1, TTFT_d / ttft_slo)``; without a target the factor is 1 (plain total latency).

Decision: with ``J = E2E + w * harm``, a path is feasible when its predicted TTFT and TPOT
stay within ``(1 - slo_margin)`` of the request's targets (the margin absorbs the prediction's
own error: without it, queues settle right at the target and half their requests miss it).
One feasible path wins; with both, the smaller ``J``, unless the two differ by at most
``slo_margin`` of the smaller: a difference within the model's own error is no evidence, and
the lower predicted TTFT wins (ties collocate). The simulator showed the cost otherwise moving
requests for e2e gains under 1 % at the price of the TTFT tail. With neither, the
request cannot make its targets, ``meets_slo`` is false (the gateway may shed it), and it goes
where it uses less of the other requests' target budgets (ties collocate)::

    D = max(1, O - 1);  slower = decode_per_seq + decode_per_ctx * (L + O/2)
    budget_c = B * (u * f(c, B) / (c D) + slower) / tpot_slo
    budget_d = q * T_P(L) / (G * ttft_slo) + B' * slower / tpot_slo

Its chunks delay each running decode by ``u f / c`` in all, spread over its remaining steps
(this request's ``D`` standing for theirs, as in ``harm``), and its joining slows their every
step by ``slower``: a share of their TPOT target. Each prefill that queues behind it on the pool
starts ``T_P(L) / G`` later: a share of its TTFT target. Its own target is lost either way.
(Comparing the harms in milliseconds instead, the earlier rule, weighed a delay spread thin
over many decodes' steps against a TTFT delay of whole requests, and under a tight TTFT target
sent long prompts to the pool until 30 waited; comparing the paths' own lateness instead lost
most of the goodput past capacity: docs/decision-model.md.) The reason code names the component
that favoured the chosen path most (see ``REASONS``).

Defaults chosen in the simulator (docs/decision-model.md): ``w = 0`` (at the usual targets
any harm weight only moves latency into the tail; with a tight TPOT target ``w = 1`` keeps
more goodput) and ``slo_margin = 0.1``.

Defaults for inputs not reported (listed in the answer's ``assumed``): no prefill queue
(q = 0, Q = q * L, r = G if q > 0 else 0, G = 1), nothing pending locally (P = 0), running
decodes with this prompt's context (K = B * L, K' = B' * L), no prefix hit (h = 0), no
targets, no recent prefill (R = R' = 0: not listed, the answer is the one before the rates
existed, bit for bit); no running prefill length (Y: not listed either, the wait is the one
before it existed, bit for bit). ``decide`` and ``decide_many`` evaluate the same operations
in the same order on IEEE doubles, so their answers agree bit for bit (a property test checks
it). The vectorised evaluation lives in ``pdroute_core.routing.queue_aware_block`` (blocks of
requests, shared among threads for large inputs) with its forms in ``queue_aware_kernels``,
the reason codes in ``pdroute_core.routing.queue_aware_reasons``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from pdroute_core.params import CostModelParams
from pdroute_core.queue_params import QueueAwareParams
from pdroute_core.records import from_fields
from pdroute_core.routing import queue_aware_block
from pdroute_core.routing.queue_aware_block import TERMS
from pdroute_core.routing.queue_aware_reasons import (
    COMPONENT_REASON,
    REASON_SLO_NONE,
    REASON_SLO_ONLY,
)
from pdroute_core.routing.queue_aware_reasons import (
    REASONS as REASONS,  # re-exported: the model's reason set
)
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


BREAKDOWN_FIELDS = tuple(f.name for f in dataclasses.fields(QueueAwareBreakdown))


def _pressure(predicted_ms: float, target_ms: float) -> float:
    """How close a request runs to its target, at most 1; 1 without a target."""
    return 1.0 if target_ms == math.inf else min(1.0, predicted_ms / target_ms)


@dataclass(frozen=True)
class QueueAwareBatch:
    """Vectorised decisions: one array per term of ``QueueAwareBreakdown``."""

    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]  # into REASONS
    optional: dict[str, FloatArray]  # the request's optional inputs (NaN: not reported)
    harm_weight: float
    terms: dict[str, FloatArray]  # every name of TERMS

    def decisions(self) -> list[Decision]:
        return [DISAGGREGATED if d else COLLOCATED for d in self.is_disaggregated.tolist()]

    def rows(self) -> list[QueueAwareBreakdown]:
        """One breakdown per request, equal to ``decide``'s for the same inputs."""
        n = int(self.is_disaggregated.shape[0])
        missing = np.stack([np.isnan(self.optional[name]) for name in OPTIONAL_INPUTS]).T.tolist()
        assumed: dict[tuple[bool, ...], tuple[str, ...]] = {}  # a few distinct masks per batch
        for mask in map(tuple, missing):
            if mask not in assumed:
                assumed[mask] = tuple(compress(OPTIONAL_INPUTS, mask))
        by_field: dict[str, list[Any]] = {
            "decision": [DISAGGREGATED if d else COLLOCATED for d in self.is_disaggregated.tolist()],
            "reason": [REASONS[r] for r in self.reason_index.tolist()],
            "assumed": [assumed[tuple(mask)] for mask in missing],
            "meets_slo": self.meets_slo.tolist(),
            "harm_weight": [self.harm_weight] * n,
            **{name: self.terms[name].tolist() for name in TERMS},
        }
        columns = [by_field[name] for name in BREAKDOWN_FIELDS]
        return [
            from_fields(QueueAwareBreakdown, dict(zip(BREAKDOWN_FIELDS, row, strict=True)))
            for row in zip(*columns, strict=True)
        ]


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

    @staticmethod
    def prefill_share(tokens_per_s: float, step: float, chunk: float, c: float) -> float:
        """``rho``: the share of a GPU's time spent on prefill chunks of ``c`` tokens at
        ``tokens_per_s`` (each chunk adds ``chunk`` ms to a decode step of ``step`` ms).

        ``rate * f / c / 1000``, capped at ``f / (s + f)``: the share when every step carries a
        full chunk, the most chunked prefill can take (``s / (1 - rho)`` then is ``s + f``). The
        cap follows from the step forms alone and keeps ``1 - rho > 0``."""
        return max(0.0, min(tokens_per_s * chunk / c / 1000.0, chunk / (step + chunk)))

    def tpot_ms(self, batch: float, context_tokens: float, pending: float, c: float, rate: float) -> float:
        """``min((s + min(1, P / c) * f) / (1 - rho), s + f)``, ``s = s(B, K)``, ``f = f(c, B)``
        (``rho``: ``prefill_share``; ``pending`` is P, the pending prompt tokens per decode step:
        ``decide`` passes 0 collocated and ``P_left / D`` disaggregated, module docstring). The
        pending chunks and the later ones share one bound: a step carries at most one chunk, so
        no TPOT exceeds ``s + f`` (without a rate it never does: the bound changes no bit)."""
        step = self.step_ms(batch, context_tokens)
        chunk = self.chunk_ms(c, batch)
        stretched = (step + min(1.0, pending / c) * chunk) / (1.0 - self.prefill_share(rate, step, chunk, c))
        return min(stretched, step + chunk)

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
        slower = self._a1 + self._a2 * (L + half_out)  # a running decode's step, once this one joins
        join = (out - 1.0) * slower

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
        rate_c = 0.0 if x.colloc_prefill_tokens_per_s is None else float(x.colloc_prefill_tokens_per_s)
        # The prompts pending here are prefilled before this one (FCFS chunks): none of its decode steps.
        tpot_c = self.tpot_ms(B + 1.0, K + L + half_out, 0.0, c, rate_c)
        e2e_c = ttft_c + (out - 1.0) * tpot_c
        raw_harm_c = B * u * f_full / c + B * join

        # Disaggregated.
        t_prefill = self.prefill_ms(L)
        t_ahead = self.prefill_ms(Q / q) if q > 0.0 else t_prefill
        t_run = t_ahead  # the prefill in progress: its own length when reported
        if x.prefill_running_tokens is not None and r > 0.0:
            t_run = self.prefill_ms(float(x.prefill_running_tokens) / r)
        wait = ((t_run / (G + 1.0) if r >= G else 0.0) + q * t_ahead / G) * self.queue_wait_scale
        transfer = (L - h) * self._xfer
        remote = t_prefill + transfer
        ttft_d = wait + remote
        rate_d = 0.0 if x.decode_prefill_tokens_per_s is None else float(x.decode_prefill_tokens_per_s)
        # The decode GPU prefills c of its pending tokens per step while this request waits for TTFT_d;
        # what is left falls among its D = max(1, O - 1) decode steps.
        step_d = self.step_ms(Bd + 1.0, Kd + L + half_out)
        f_d = self.chunk_ms(c, Bd + 1.0)
        left = max(0.0, Pd - c * ttft_d / (step_d + f_d))
        tpot_d = self.tpot_ms(Bd + 1.0, Kd + L + half_out, left / max(1.0, out - 1.0), c, rate_d)
        e2e_d = ttft_d + (out - 1.0) * tpot_d
        queue_harm = q * t_prefill / G
        # Harm is priced by how close its victims run to their targets (1 without a target).
        harm_c = _pressure(tpot_c, tpot_slo) * raw_harm_c
        harm_d = _pressure(ttft_d, ttft_slo) * queue_harm + _pressure(tpot_d, tpot_slo) * (Bd * join)

        cost_c = e2e_c + w * harm_c
        cost_d = e2e_d + w * harm_d
        late_c = max(ttft_c / ttft_slo, tpot_c / tpot_slo)
        late_d = max(ttft_d / ttft_slo, tpot_d / tpot_slo)
        ok_c, ok_d = late_c <= self._feasible, late_d <= self._feasible
        if ok_c and ok_d:
            # Costs within the model's own error of each other are equal: the lower TTFT wins.
            if abs(cost_d - cost_c) <= self.slo_margin * min(cost_c, cost_d):
                is_disagg = ttft_d < ttft_c
            else:
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
            reason = COMPONENT_REASON[DISAGGREGATED if is_disagg else COLLOCATED][best]
            meets = True
        elif ok_c or ok_d:
            is_disagg, reason, meets = ok_d, REASON_SLO_ONLY, True
        else:
            # Others' target budgets this request would use: each running decode's TPOT target
            # (the chunks' delay over D steps and the slower shared step), each prefill queued
            # behind it on the pool its TTFT target (the module docstring).
            D = max(1.0, out - 1.0)
            budget_c = B * (u * f_full / (c * D) + slower) / tpot_slo
            budget_d = q * t_prefill / (G * ttft_slo) + Bd * slower / tpot_slo
            is_disagg, reason, meets = budget_d < budget_c, REASON_SLO_NONE, False
        # QueueAwareBreakdown's fields in order (from_fields: a tenth of the constructor's cost).
        return from_fields(
            QueueAwareBreakdown,
            {
                "decision": DISAGGREGATED if is_disagg else COLLOCATED,
                "reason": reason,
                "t_collocated_ms": e2e_c,
                "t_disaggregated_ms": e2e_d,
                "assumed": x.missing(),
                "meets_slo": meets,
                "ttft_collocated_ms": ttft_c,
                "ttft_disaggregated_ms": ttft_d,
                "tpot_collocated_ms": tpot_c,
                "tpot_disaggregated_ms": tpot_d,
                "local_backlog_ms": backlog,
                "local_prefill_ms": own_c,
                "chunk_steps": float(n),
                "prefill_wait_ms": wait,
                "prefill_ms": t_prefill,
                "transfer_ms": transfer,
                "harm_collocated_ms": harm_c,
                "harm_disaggregated_ms": harm_d,
                "harm_weight": w,
                "cost_collocated_ms": cost_c,
                "cost_disaggregated_ms": cost_d,
            },
        )

    # --- many requests ------------------------------------------------------------------------
    def decide_many(self, cols: RouteColumns) -> QueueAwareBatch:
        """``decide`` for every request of ``cols``, vectorised: the same bits.

        Evaluated by ``pdroute_core.routing.queue_aware_block``, in blocks of its ``BLOCK`` requests,
        on several threads from its ``PARALLEL_MIN_REQUESTS`` requests on (the same bits).
        """
        answers = queue_aware_block.decide_many(self, cols)
        return QueueAwareBatch(
            is_disaggregated=answers.is_disaggregated,
            meets_slo=answers.meets_slo,
            reason_index=answers.reason_index,
            optional=cols.optional,
            harm_weight=self.harm_weight,
            terms=answers.terms,
        )
