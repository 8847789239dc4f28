"""The queue-aware model's answers: one decision with every term, and many as columns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from pdroute_core.frozen import from_fields
from pdroute_core.route_fields import OPTIONAL_INPUTS
from pdroute_core.routing.objective import ADMISSIONS, Admission, Objective
from pdroute_core.routing.queue_aware_reasons import REASONS
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, Decision, FloatArray


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
    objective: Objective  # what the decision optimised (pdroute_core.routing.objective)
    predicted_lateness_ms: float  # the chosen path's TTFT past the TTFT target (0: on time)
    admission: Admission  # admit / defer / shed (pdroute_core.routing.objective)

    @property
    def chosen_ttft_ms(self) -> float:
        """Predicted time to first token of the chosen path (ms)."""
        return self.ttft_disaggregated_ms if self.decision == DISAGGREGATED else self.ttft_collocated_ms

    @property
    def chosen_e2e_ms(self) -> float:
        """Predicted end-to-end latency of the chosen path (ms)."""
        return self.t_disaggregated_ms if self.decision == DISAGGREGATED else self.t_collocated_ms


BREAKDOWN_FIELDS = tuple(f.name for f in dataclasses.fields(QueueAwareBreakdown))
# The float terms of ``QueueAwareBreakdown`` (ms unless named otherwise), one array each in a batch.
FLOAT_TERMS = tuple(
    name
    for name in BREAKDOWN_FIELDS
    if name not in ("decision", "reason", "assumed", "meets_slo", "harm_weight", "objective", "admission")
)


@dataclass(frozen=True)
class QueueAwareBatch:
    """Vectorised decisions: one array per term of ``QueueAwareBreakdown``."""

    is_disaggregated: npt.NDArray[np.bool_]
    meets_slo: npt.NDArray[np.bool_]
    reason_index: npt.NDArray[np.int64]  # into REASONS
    optional: dict[str, FloatArray]  # the request's optional inputs (NaN: not reported)
    harm_weight: float
    terms: dict[str, FloatArray]  # every name of FLOAT_TERMS
    objective: Objective
    admission_index: npt.NDArray[np.int64]  # into ADMISSIONS

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
            "decision": self.decisions(),
            "reason": [REASONS[r] for r in self.reason_index.tolist()],
            "assumed": [assumed[tuple(mask)] for mask in missing],
            "meets_slo": self.meets_slo.tolist(),
            "harm_weight": [self.harm_weight] * n,
            "objective": [self.objective] * n,
            "admission": [ADMISSIONS[a] for a in self.admission_index.tolist()],
            **{name: self.terms[name].tolist() for name in FLOAT_TERMS},
        }
        columns = [by_field[name] for name in BREAKDOWN_FIELDS]
        return [
            from_fields(QueueAwareBreakdown, dict(zip(BREAKDOWN_FIELDS, row, strict=True)))
            for row in zip(*columns, strict=True)
        ]
