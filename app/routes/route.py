"""``POST /route`` and ``POST /route/batch``: the gateway's per-request decision.

Each handler reads the params snapshot once, decides (pure), then records metrics (I/O).
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.deps import MetricsDep, SettingsDep, StoreDep
from app.metrics import Metrics
from app.schemas import Breakdown, RouteBatchRequest, RouteBatchResponse, RouteRequest, RouteResponse
from solver.costmodel import RouteBreakdown

router = APIRouter(tags=["route"])
JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"content": {JSON: {"schema": model.model_json_schema()}}, "required": True}
    return {"requestBody": schema}


def _parse(model: type[M], raw: bytes) -> M:
    """Validate a raw JSON body, whatever its content-type (gateways are not always careful).

    pydantic parses the bytes directly, which is faster than FastAPI's decode-then-validate.
    Errors surface as ``RequestValidationError`` with ``body`` locations, as FastAPI's would.
    """
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _record(metrics: Metrics, b: RouteBreakdown, system_load: int, decode_batch_size: int) -> None:
    metrics.decisions.labels(decision=b.decision).inc()
    metrics.predicted_latency.labels(path="collocated").observe(b.t_collocated_ms / 1000.0)
    metrics.predicted_latency.labels(path="disaggregated").observe(b.t_disaggregated_ms / 1000.0)
    metrics.predicted_saving.labels(decision=b.decision).observe(b.saving_ms / 1000.0)
    metrics.system_load.observe(system_load)
    metrics.decode_batch.observe(decode_batch_size)


def _response(b: RouteBreakdown, params_id: str, request_id: str | None) -> RouteResponse:
    return RouteResponse(
        decision=b.decision,
        t_collocated_ms=b.t_collocated_ms,
        t_disaggregated_ms=b.t_disaggregated_ms,
        breakdown=Breakdown(
            prefill_ms=b.prefill_ms,
            transfer_ms=b.transfer_ms,
            interference_ms=b.interference_ms,
            decode_collocated_ms=b.decode_collocated_ms,
            decode_disaggregated_ms=b.decode_disaggregated_ms,
        ),
        params_id=params_id,
        request_id=request_id,
    )


@router.post("/route", response_model=RouteResponse, openapi_extra=_body_doc(RouteRequest))
async def route(request: Request, store: StoreDep, metrics: MetricsDep, settings: SettingsDep) -> Response:
    """Decide one request: collocated or disaggregated, with both predicted latencies."""
    body = _parse(RouteRequest, await request.body())
    snapshot = store.current
    output_len = body.predicted_output_len or settings.default_output_len
    b = snapshot.model.explain(
        body.prompt_len, output_len, body.system_load, body.decode_batch_size, body.chunk_size
    )
    _record(metrics, b, body.system_load, body.decode_batch_size)
    return Response(_response(b, snapshot.params_id, body.request_id).model_dump_json(), media_type=JSON)


@router.post("/route/batch", response_model=RouteBatchResponse, openapi_extra=_body_doc(RouteBatchRequest))
async def route_batch(
    request: Request, store: StoreDep, metrics: MetricsDep, settings: SettingsDep
) -> Response:
    """Decide many requests in order through the vectorised model (same decisions as /route)."""
    body = _parse(RouteBatchRequest, await request.body())
    if len(body.requests) > settings.max_batch_requests:
        raise HTTPException(
            422,
            f"requests: {len(body.requests)} items is over the limit of {settings.max_batch_requests}",
        )
    snapshot = store.current
    reqs = body.requests
    default_out = settings.default_output_len
    batch = snapshot.model.route_many(
        [r.prompt_len for r in reqs],
        [r.predicted_output_len or default_out for r in reqs],
        [r.system_load for r in reqs],
        [r.decode_batch_size for r in reqs],
    )
    results = []
    columns = zip(
        batch.decisions(),
        batch.t_collocated_ms.tolist(),
        batch.t_disaggregated_ms.tolist(),
        batch.prefill_ms.tolist(),
        batch.transfer_ms.tolist(),
        batch.interference_ms.tolist(),
        batch.decode_collocated_ms.tolist(),
        batch.decode_disaggregated_ms.tolist(),
        strict=True,
    )
    for req, (decision, t_c, t_d, pre, tr, inter, dc, dd) in zip(reqs, columns, strict=True):
        b = RouteBreakdown(decision, t_c, t_d, pre, tr, inter, dc, dd)
        _record(metrics, b, req.system_load, req.decode_batch_size)
        results.append(_response(b, snapshot.params_id, req.request_id))
    out = RouteBatchResponse(results=results, params_id=snapshot.params_id)
    return Response(out.model_dump_json(), media_type=JSON)
