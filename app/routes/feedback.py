"""``POST /feedback`` and ``POST /feedback/batch``: observed latencies for online calibration.

Off (409) unless ``PDROUTE_CALIBRATION_ENABLED``. When ``PDROUTE_ADMIN_TOKEN`` is set, a valid
``Authorization: Bearer <token>`` is required (401 otherwise), as for ``/admin/reload``.
Items name a recent ``/route`` answer by ``request_id`` or carry its ``inputs`` and ``path``.
With ``PDROUTE_OUTPUT_LEN_LEARNING=correct``, an item's ``output_tokens`` also teaches the
output-length correction (``app.learners.output_length``), and an item's ``inputs`` are corrected
as ``/route`` corrects them before the calibration replays the decision.
An unknown (or evicted) request id is counted and reported in ``unknown_ids`` of a 202 answer:
the sender cannot fix it by retrying, and nothing else of the batch is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Request

from app.deps import MetricsDep, SettingsDep, StoreDep
from app.http.bearer import require_bearer
from app.learners.calibration import CalibrationState, Observed
from app.learners.output_length import OutputLearningState
from app.metrics.service import Metrics
from app.params_store import ParamsStore
from app.routes.route import corrected_inputs
from app.schemas.feedback import FeedbackBatch, FeedbackItem, FeedbackResponse
from app.settings import Settings
from pdroute_core.request_defaults import route_inputs

router = APIRouter(tags=["calibration"])


async def _calibration(request: Request) -> CalibrationState:
    state: CalibrationState = request.app.state.calibration
    return state


@dataclass(frozen=True)
class _Feedback:
    """What a feedback handler works with (the app's injected objects)."""

    cal: CalibrationState
    learning: OutputLearningState | None  # PDROUTE_OUTPUT_LEN_LEARNING=correct only
    store: ParamsStore
    settings: Settings
    metrics: Metrics


async def _feedback(
    request: Request,
    cal: Annotated[CalibrationState, Depends(_calibration)],
    store: StoreDep,
    settings: SettingsDep,
    metrics: MetricsDep,
) -> _Feedback:
    return _Feedback(cal, request.app.state.output_learning, store, settings, metrics)


FeedbackDep = Annotated[_Feedback, Depends(_feedback)]


def _authorize(settings: Settings, authorization: str | None) -> None:
    if not settings.calibration_enabled:
        raise HTTPException(
            409, "calibration is off: set PDROUTE_CALIBRATION_ENABLED=true to accept feedback"
        )
    if settings.admin_token is not None:
        require_bearer(settings.admin_token, authorization)


def _apply(items: list[FeedbackItem], deps: _Feedback) -> FeedbackResponse:
    cal, metrics = deps.cal, deps.metrics
    snapshot = deps.store.current
    cal.model_for(snapshot.params_id, snapshot.model)  # the served params, adopted (or reset) now
    defaults = deps.settings.route_defaults()
    unknown: list[str] = []
    counts = {"accepted": 0, "not_calibrated": 0}
    learning = deps.learning
    for item in items:
        observed = Observed(item.ttft_ms, item.tpot_ms, item.e2e_ms, item.output_tokens)
        inputs = None if item.inputs is None else route_inputs(item.inputs, defaults)
        if learning is not None:
            if item.output_tokens is not None:
                learning.feedback(
                    item.output_tokens,
                    request_id=item.request_id,
                    prompt_len=None if inputs is None else inputs.prompt_len,
                    told_len=None if inputs is None else inputs.predicted_output_len,
                )
            if inputs is not None:  # what /route decides on for these inputs
                inputs = corrected_inputs(learning, inputs, None)
        outcome = cal.feedback(observed, request_id=item.request_id, inputs=inputs, path=item.path)
        metrics.calibration.record(outcome)
        if outcome == "unknown_id" and item.request_id is not None:
            unknown.append(item.request_id)
        elif outcome in counts:
            counts[outcome] += 1
    metrics.calibration.update(cal)
    if learning is not None:
        metrics.output_learning.update(learning.snapshot)
    return FeedbackResponse(
        accepted=counts["accepted"],
        unknown_ids=unknown,
        not_calibrated=counts["not_calibrated"],
        corrections=cal.corrections.as_dict(),
    )


@router.post("/feedback", response_model=FeedbackResponse, status_code=202)
def post_feedback(
    item: FeedbackItem, deps: FeedbackDep, authorization: str | None = Header(default=None)
) -> FeedbackResponse:
    _authorize(deps.settings, authorization)
    return _apply([item], deps)


@router.post("/feedback/batch", response_model=FeedbackResponse, status_code=202)
def post_feedback_batch(
    batch: FeedbackBatch, deps: FeedbackDep, authorization: str | None = Header(default=None)
) -> FeedbackResponse:
    _authorize(deps.settings, authorization)
    limit = deps.settings.max_feedback_items
    if len(batch.items) > limit:
        raise HTTPException(422, f"items: {len(batch.items)} items is over the limit of {limit}")
    return _apply(batch.items, deps)
