"""The design document's analytical cost model of one request: collocated vs disaggregated.

Formulas (L = prompt length, out = predicted output length; every time in ms)::

    t_prefill(L)          = alpha * L
    t_transfer(L)         = L * bytes_per_token / (bandwidth_GBps * 1e6)
    t_decode_step(b)      = beta                       if b <= batch_thresh
                          = beta * b / batch_thresh    otherwise (compute-bound)
    t_decode_total(out,b) = t_decode_step(b) * out
    interference(L, load) = gamma * L * min(load, batch_thresh) / batch_thresh
    t_collocated          = t_prefill + t_decode_total(out, system_load) + interference
    t_disaggregated       = t_prefill + t_transfer + t_decode_total(out, 1)
    route: t_d uses t_decode_total(out, decode_batch_size + 1); "disaggregated" iff t_d < t_c

The scalar methods and the vectorised ``route_many`` evaluate the same operations in the same
order on IEEE doubles, so their results agree bit for bit (tested as a property).

``chunk_size`` is accepted by ``t_collocated``/``route`` as in the design, but the design's
interference term does not depend on it: it charges the whole prompt's interference whatever
the chunking. The model reads none of the optional inputs of ``RouteInputs``.

This module holds the formulas only: fitting is ``solver.fit``, the params file
``solver.params``, the figures ``solver.plots``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pdroute_core.frozen import from_fields
from pdroute_core.params import CostModelParams
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, Decision, RouteColumns, RouteInputs

FloatArray = npt.NDArray[np.float64]
IntLike = npt.ArrayLike

NAME = "design"
# Why the design's formula chose a path: its two terms linear in L that differ between paths.
REASON_INTERFERENCE = "interference"  # disaggregated: interference on the busy GPU outweighs the transfer
REASON_TRANSFER = "kv_transfer"  # collocated: the transfer (and decode terms) outweigh interference
REASONS = (REASON_INTERFERENCE, REASON_TRANSFER)


@dataclass(frozen=True)
class RouteBreakdown:
    """One decision with every term that produced it (ms)."""

    decision: Decision
    reason: str
    t_collocated_ms: float
    t_disaggregated_ms: float
    assumed: tuple[str, ...]
    prefill_ms: float
    transfer_ms: float
    interference_ms: float
    decode_collocated_ms: float
    decode_disaggregated_ms: float

    @property
    def chosen_ttft_ms(self) -> float:
        """The design's time to first token of the chosen path: the prefill, plus the transfer
        when disaggregated or the interference when collocated (ms)."""
        if self.decision == DISAGGREGATED:
            return self.prefill_ms + self.transfer_ms
        return self.prefill_ms + self.interference_ms

    @property
    def chosen_e2e_ms(self) -> float:
        """Predicted end-to-end latency of the chosen path (ms)."""
        return self.t_disaggregated_ms if self.decision == DISAGGREGATED else self.t_collocated_ms

    @property
    def meets_slo(self) -> bool:
        """The design's model has no targets: every answer stands."""
        return True

    @property
    def saving_ms(self) -> float:
        """Predicted latency of the path not taken minus the path taken (>= 0)."""
        return abs(self.t_collocated_ms - self.t_disaggregated_ms)


@dataclass(frozen=True)
class RouteBatch:
    """Vectorised decisions: ``is_disaggregated[i]`` and the same terms as ``RouteBreakdown``."""

    is_disaggregated: npt.NDArray[np.bool_]
    t_collocated_ms: FloatArray
    t_disaggregated_ms: FloatArray
    prefill_ms: FloatArray
    transfer_ms: FloatArray
    interference_ms: FloatArray
    decode_collocated_ms: FloatArray
    decode_disaggregated_ms: FloatArray

    def decisions(self) -> list[Decision]:
        return [DISAGGREGATED if d else COLLOCATED for d in self.is_disaggregated.tolist()]

    def rows(self) -> list[RouteBreakdown]:
        """One ``RouteBreakdown`` per request, equal to ``explain``'s for the same inputs."""
        columns = zip(
            self.is_disaggregated.tolist(),
            self.t_collocated_ms.tolist(),
            self.t_disaggregated_ms.tolist(),
            self.prefill_ms.tolist(),
            self.transfer_ms.tolist(),
            self.interference_ms.tolist(),
            self.decode_collocated_ms.tolist(),
            self.decode_disaggregated_ms.tolist(),
            strict=True,
        )
        return [
            RouteBreakdown(
                DISAGGREGATED if d else COLLOCATED,
                REASON_INTERFERENCE if d else REASON_TRANSFER,
                tc,
                td,
                (),
                *terms,
            )
            for d, tc, td, *terms in columns
        ]


class AnalyticalCostModel:
    """Predicts both paths' end-to-end latency from ``CostModelParams`` and picks the faster."""

    name = NAME
    reasons = REASONS

    def __init__(self, params: CostModelParams) -> None:
        self.params = params
        # Plain floats on the hot path: attribute lookups through the dataclass are slower.
        self._alpha = float(params.alpha)
        self._beta = float(params.beta)
        self._thresh = float(params.batch_thresh)
        self._gamma = float(params.gamma)
        self._bpt = float(params.bytes_per_token)
        self._bw = float(params.bandwidth_GBps) * 1e6

    # --- the design's formulas (scalar) -----------------------------------------------------
    def t_prefill(self, prompt_len: float) -> float:
        """Prefill latency (ms): alpha * L."""
        return self._alpha * prompt_len

    def t_transfer(self, prompt_len: float) -> float:
        """KV-cache transfer latency (ms): L * bytes_per_token / (bandwidth_GBps * 1e6)."""
        return prompt_len * self._bpt / self._bw

    def t_decode_step(self, batch_size: float) -> float:
        """One decode step (ms): beta while memory-bound, then linear in the batch."""
        if batch_size <= self._thresh:
            return self._beta
        return self._beta * batch_size / self._thresh

    def t_decode_total(self, output_len: float, batch_size: float) -> float:
        """All decode steps of one request (ms)."""
        return self.t_decode_step(batch_size) * output_len

    def t_interference(self, prompt_len: float, system_load: float) -> float:
        """Extra latency a prefill of L tokens costs on a GPU running ``system_load`` decodes."""
        return self._gamma * prompt_len * min(system_load, self._thresh) / self._thresh

    def t_collocated(
        self, prompt_len: float, output_len: float, system_load: float, chunk_size: int = 256
    ) -> float:
        """Collocated end-to-end latency (ms); ``chunk_size`` does not enter the design's form."""
        return (
            self.t_prefill(prompt_len)
            + self.t_decode_total(output_len, system_load)
            + self.t_interference(prompt_len, system_load)
        )

    def t_disaggregated(self, prompt_len: float, output_len: float) -> float:
        """Disaggregated end-to-end latency (ms) on an otherwise idle decode GPU."""
        return self.t_prefill(prompt_len) + self.t_transfer(prompt_len) + self.t_decode_total(output_len, 1)

    def explain(
        self,
        prompt_len: int,
        predicted_output_len: int,
        system_load: int,
        decode_batch_size: int = 1,
        chunk_size: int = 256,
    ) -> RouteBreakdown:
        """The routing decision with all of its terms."""
        prefill = self.t_prefill(prompt_len)
        transfer = self.t_transfer(prompt_len)
        interference = self.t_interference(prompt_len, system_load)
        decode_c = self.t_decode_total(predicted_output_len, system_load)
        decode_d = self.t_decode_total(predicted_output_len, decode_batch_size + 1)
        t_c = prefill + decode_c + interference
        t_d = prefill + transfer + decode_d
        is_disagg = t_d < t_c
        # RouteBreakdown's fields in order (from_fields: a tenth of the constructor's cost).
        return from_fields(
            RouteBreakdown,
            {
                "decision": DISAGGREGATED if is_disagg else COLLOCATED,
                "reason": REASON_INTERFERENCE if is_disagg else REASON_TRANSFER,
                "t_collocated_ms": t_c,
                "t_disaggregated_ms": t_d,
                "assumed": (),
                "prefill_ms": prefill,
                "transfer_ms": transfer,
                "interference_ms": interference,
                "decode_collocated_ms": decode_c,
                "decode_disaggregated_ms": decode_d,
            },
        )

    def decide(self, inputs: RouteInputs) -> RouteBreakdown:
        """The ``DecisionModel`` call: ``explain`` on the design's five inputs."""
        return self.explain(
            inputs.prompt_len,
            inputs.predicted_output_len,
            inputs.system_load,
            inputs.decode_batch_size,
            inputs.chunk_size,
        )

    def decide_many(self, columns: RouteColumns) -> RouteBatch:
        """The ``DecisionModel`` call: ``route_many`` on the design's inputs."""
        return self.route_many(
            columns.prompt_len, columns.predicted_output_len, columns.system_load, columns.decode_batch_size
        )

    def route(
        self,
        prompt_len: int,
        predicted_output_len: int,
        system_load: int,
        decode_batch_size: int = 1,
        chunk_size: int = 256,
    ) -> tuple[Decision, float, float]:
        """``(decision, t_collocated_ms, t_disaggregated_ms)`` as in the design."""
        b = self.explain(prompt_len, predicted_output_len, system_load, decode_batch_size, chunk_size)
        return b.decision, b.t_collocated_ms, b.t_disaggregated_ms

    # --- vectorised --------------------------------------------------------------------------
    def _decode_step_many(self, batch: FloatArray) -> FloatArray:
        return np.where(batch <= self._thresh, self._beta, self._beta * batch / self._thresh)

    def route_many(
        self,
        prompt_len: IntLike,
        predicted_output_len: IntLike,
        system_load: IntLike,
        decode_batch_size: IntLike = 1,
        chunk_size: IntLike = 256,
    ) -> RouteBatch:
        """Decide many requests at once; same operations as ``explain``, so the same bits."""
        L = np.asarray(prompt_len, dtype=np.float64)
        out = np.asarray(predicted_output_len, dtype=np.float64)
        load = np.asarray(system_load, dtype=np.float64)
        dbs = np.asarray(decode_batch_size, dtype=np.float64)
        L, out, load, dbs = np.broadcast_arrays(L, out, load, dbs)
        prefill = self._alpha * L
        transfer = L * self._bpt / self._bw
        interference = self._gamma * L * np.minimum(load, self._thresh) / self._thresh
        decode_c = self._decode_step_many(load) * out
        decode_d = self._decode_step_many(dbs + 1.0) * out
        t_c = prefill + decode_c + interference
        t_d = prefill + transfer + decode_d
        return RouteBatch(
            is_disaggregated=t_d < t_c,
            t_collocated_ms=t_c,
            t_disaggregated_ms=t_d,
            prefill_ms=prefill,
            transfer_ms=transfer,
            interference_ms=interference,
            decode_collocated_ms=decode_c,
            decode_disaggregated_ms=decode_d,
        )

    @property
    def break_even_load(self) -> float:
        """``batch_thresh * transfer_rate / gamma`` (see ``CostModelParams.break_even_load``)."""
        return self.params.break_even_load
