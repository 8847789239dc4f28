"""The bodies of ``POST /feedback`` and ``POST /feedback/batch`` (docs/calibration.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from app.schemas.route import RouteRequest, StrictModel
from pdroute_core.bounds import MAX_REQUEST_ID_LEN

MAX_LATENCY_MS = 86_400_000.0  # a day: anything longer is not a latency
MAX_OUTPUT_TOKENS = 16_777_216

LatencyMs = Annotated[float | None, Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)]


class FeedbackItem(StrictModel):
    """One finished request: which decision (``request_id``, or ``inputs`` and ``path``) and
    what was observed (any subset of TTFT, TPOT and e2e in ms, at least one)."""

    request_id: Annotated[str | None, Field(min_length=1, max_length=MAX_REQUEST_ID_LEN)] = None
    inputs: RouteRequest | None = None
    path: Literal["collocated", "disaggregated"] | None = None
    ttft_ms: LatencyMs = None
    tpot_ms: LatencyMs = None
    e2e_ms: LatencyMs = None
    output_tokens: Annotated[int | None, Field(ge=1, le=MAX_OUTPUT_TOKENS)] = None

    # The JSON numbers of the latencies may be integers: strict mode would refuse 12 for a float.
    model_config = StrictModel.model_config | {"strict": False}

    @model_validator(mode="after")
    def _check(self) -> FeedbackItem:
        if (self.request_id is None) == (self.inputs is None):
            raise ValueError("request_id: give either request_id or inputs (with path), not both nor neither")
        if self.inputs is not None and self.path is None:
            raise ValueError("path: required with inputs (collocated or disaggregated)")
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("ttft_ms: give at least one of ttft_ms, tpot_ms, e2e_ms")
        return self


class FeedbackBatch(StrictModel):
    items: Annotated[list[FeedbackItem], Field(min_length=1)]


class FeedbackResponse(StrictModel):
    accepted: int  # items fed to the estimator
    unknown_ids: list[str]  # request ids not (or no longer) among the recent decisions
    not_calibrated: int  # items received while the served model is not calibrated (not queue-aware)
    corrections: dict[str, float]  # in force after this feedback
