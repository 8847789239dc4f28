"""``POST /feedback`` and ``POST /feedback/batch``: observed latencies for online calibration.

Off (409) unless ``PDROUTE_CALIBRATION_ENABLED``. When ``PDROUTE_ADMIN_TOKEN`` is set, a valid
``Authorization: Bearer <token>`` is required (401 otherwise), as for ``/admin/reload``.
Items name a recent ``/route`` answer by ``request_id`` or carry its ``inputs`` and ``path``.
An unknown (or evicted) request id is counted and reported in ``unknown_ids`` of a 202 answer:
the sender cannot fix it by retrying, and nothing else of the batch is lost.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Request

from app.calibration_state import CalibrationState, Observed
from app.deps import MetricsDep, SettingsDep, StoreDep
from app.metrics import Metrics
from app.params_store import ParamsStore
from app.routes.route import RouteDefaults, route_inputs
from app.schemas_feedback import FeedbackBatch, FeedbackItem, FeedbackResponse
from app.settings import Settings

router = APIRouter(tags=["calibration"])


async def _calibration(request: Request) -> CalibrationState:
    state: CalibrationState = request.app.state.calibration
    return state


CalibrationDep = Annotated[CalibrationState, Depends(_calibration)]


def _authorize(settings: Settings, authorization: str | None) -> None:
    if not settings.calibration_enabled:
        raise HTTPException(
            409, "calibration is off: set PDROUTE_CALIBRATION_ENABLED=true to accept feedback"
        )
    if settings.admin_token is None:
        return
    expected = f"Bearer {settings.admin_token.get_secret_value()}"
    if authorization is None or not hmac.compare_digest(authorization.encode(), expected.encode()):
        raise HTTPException(
            401,
            "authorization: a valid 'Bearer <token>' header is required",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _apply(
    items: list[FeedbackItem], cal: CalibrationState, store: ParamsStore, settings: Settings, metrics: Metrics
) -> FeedbackResponse:
    snapshot = store.current
    cal.model_for(snapshot.params_id, snapshot.model)  # the served params, adopted (or reset) now
    defaults = RouteDefaults.from_settings(settings)
    unknown: list[str] = []
    counts = {"accepted": 0, "not_calibrated": 0}
    for item in items:
        observed = Observed(item.ttft_ms, item.tpot_ms, item.e2e_ms, item.output_tokens)
        inputs = None if item.inputs is None else route_inputs(item.inputs, defaults)
        outcome = cal.feedback(observed, request_id=item.request_id, inputs=inputs, path=item.path)
        metrics.calibration.record(outcome)
        if outcome == "unknown_id" and item.request_id is not None:
            unknown.append(item.request_id)
        elif outcome in counts:
            counts[outcome] += 1
    metrics.calibration.update(cal)
    return FeedbackResponse(
        accepted=counts["accepted"],
        unknown_ids=unknown,
        not_calibrated=counts["not_calibrated"],
        corrections=cal.corrections.as_dict(),
    )


@router.post("/feedback", response_model=FeedbackResponse, status_code=202)
def post_feedback(
    item: FeedbackItem,
    cal: CalibrationDep,
    store: StoreDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    authorization: str | None = Header(default=None),
) -> FeedbackResponse:
    _authorize(settings, authorization)
    return _apply([item], cal, store, settings, metrics)


@router.post("/feedback/batch", response_model=FeedbackResponse, status_code=202)
def post_feedback_batch(
    batch: FeedbackBatch,
    cal: CalibrationDep,
    store: StoreDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    authorization: str | None = Header(default=None),
) -> FeedbackResponse:
    _authorize(settings, authorization)
    if len(batch.items) > settings.max_feedback_items:
        raise HTTPException(
            422, f"items: {len(batch.items)} items is over the limit of {settings.max_feedback_items}"
        )
    return _apply(batch.items, cal, store, settings, metrics)
