"""``POST /route`` and ``POST /route/batch``: the gateway's per-request decision, one path each.

``decide`` is the pure decision (a parsed request in, the model's breakdown out; a domain
error raised as ``PdrouteError``). ``RouteEndpoint`` is the one endpoint around it, a body
endpoint of ``app.http.envelope.RequestEnvelope``: the envelope reads the body and sends the
answer; ``respond`` parses the bytes (pydantic, whatever the content-type), decides against the
params snapshot it read once, records the metrics and encodes the answer (``app.http.route_codec``,
derived from the breakdown dataclass). An unexpected exception answers the envelope's JSON 500.

FastAPI's router and dependency solving are not on this path: they cost more than the decision
(measured in ``bench/bench_route.py``), and ``/route`` is called once per LLM request.
``openapi_paths`` documents both bodies in the service's OpenAPI schema.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pydantic_core
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import JsonSchemaMode
from starlette.types import Scope

from app.engines.request_fill import RequestFiller, Sources
from app.http.error_body import SCOPE_KEY, Answer, error_answer
from app.http.errors import status_for, validation_error_body
from app.http.json_codec import dumps
from app.http.route_codec import encoder_for
from app.learners.calibration import CalibrationState
from app.learners.output_length import OutputLearningState
from app.metrics.service import Metrics
from app.params_store import ParamsStore
from app.schemas.route import (
    ErrorResponse,
    RouteBatchRequest,
    RouteBatchResponse,
    RouteRequest,
    RouteResponse,
)
from app.settings import Settings
from pdroute_core.errors import PdrouteError
from pdroute_core.request_defaults import RouteDefaults, route_inputs
from pdroute_core.routing import DecisionModel, QueueAwareModel, RouteColumns, RouteInputs

JSON = "application/json"
# The raw model's terms shown beside a calibrated answer.
RAW_TERMS = (
    "ttft_collocated_ms",
    "ttft_disaggregated_ms",
    "tpot_collocated_ms",
    "tpot_disaggregated_ms",
    "t_collocated_ms",
    "t_disaggregated_ms",
)
_JSON_HEADER = (b"content-type", b"application/json")


def corrected_inputs(
    learning: OutputLearningState, inputs: RouteInputs, request_id: str | None
) -> RouteInputs:
    """``inputs`` with ``predicted_output_len`` corrected by the learnt snapshot in force; the told
    length is remembered by ``request_id`` for its feedback (``app.learners.output_length``)."""
    told = inputs.predicted_output_len
    if request_id is not None:
        learning.remember(request_id, inputs.prompt_len, told)
    corrected = learning.snapshot.corrected(inputs.prompt_len, told)
    return inputs if corrected == told else dataclasses.replace(inputs, predicted_output_len=corrected)


def for_objective(model: DecisionModel, objective: str | None) -> DecisionModel:
    """``model`` deciding for the request's ``objective`` (``None``: the service's setting); the
    design's model has no targets to optimise against and decides as it does."""
    if objective is None or not isinstance(model, QueueAwareModel):
        return model
    return model.with_objective(objective)


def decide(model: DecisionModel, req: RouteRequest, defaults: RouteDefaults) -> tuple[RouteInputs, Any]:
    """The decision (pure): a parsed request in, the model's inputs and breakdown out.

    Raises ``PdrouteError`` for a request the model cannot decide.
    """
    inputs = route_inputs(req, defaults)
    return inputs, for_objective(model, req.objective).decide(inputs)


def decide_inputs(
    model: DecisionModel, inputs: list[RouteInputs], objectives: list[str | None] | None = None
) -> list[Any]:
    """The breakdowns of many requests' inputs, through the vectorised model; ``objectives``:
    each request's override (the requests of one objective are decided together, order kept)."""
    if objectives is None or all(o is None for o in objectives):
        return model.decide_many(RouteColumns.from_inputs(inputs)).rows()
    answers: list[Any] = [None] * len(inputs)
    for objective in dict.fromkeys(objectives):
        where = [i for i, o in enumerate(objectives) if o == objective]
        rows = for_objective(model, objective).decide_many(
            RouteColumns.from_inputs([inputs[i] for i in where])
        )
        for i, b in zip(where, rows.rows(), strict=True):
            answers[i] = b
    return answers


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    """A body's validation errors, located under ``body`` as FastAPI locates them."""
    return [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]


class RouteEndpoint:
    """The body endpoint of ``/route`` (or, with ``batch``, ``/route/batch``)."""

    def __init__(
        self,
        store: ParamsStore,
        metrics: Metrics,
        settings: Settings,
        *,
        batch: bool,
        calibration: CalibrationState | None = None,
        filler: RequestFiller | None = None,
        output_learning: OutputLearningState | None = None,
    ) -> None:
        self.store = store
        # Only when PDROUTE_OUTPUT_LEN_LEARNING=correct: off, one attribute check per request.
        self.output_learning = output_learning
        # Only when calibration is enabled: with it off, the answer path is the same code as before.
        self.calibration = calibration
        # Requests naming engine targets (decode_target, ...) are filled from the latest scrape.
        self.filler = filler if filler is not None else RequestFiller(None, time.monotonic, 0.0)
        self.record = metrics.route_recorder()
        self.defaults = settings.route_defaults()
        self.max_batch = settings.max_batch_requests
        self.path = "/route/batch" if batch else "/route"
        self.answer = self._answer_batch if batch else self._answer

    def respond(self, raw: bytes, scope: Scope) -> Answer:
        """The answer to one request body: 200 with the decision, or the 4xx of bad input."""
        try:
            body = self.answer(raw, scope)
        except ValidationError as exc:
            problem = validation_error_body(_errors(exc))
            return error_answer(scope, 422, problem["error"], detail=problem["detail"])
        except PdrouteError as exc:
            return error_answer(scope, status_for(exc), str(exc), detail=type(exc).__name__)
        return 200, [_JSON_HEADER, (b"content-length", str(len(body)).encode())], body

    def _answer(self, raw: bytes, scope: Scope) -> bytes:
        req = RouteRequest.model_validate_json(raw)
        if req.request_id is not None:
            scope[SCOPE_KEY] = req.request_id  # an error answer from here on carries it
        snapshot = self.store.current
        model = snapshot.model
        sources: Sources | None = None
        if req.names_target:
            engines, now = self.filler.current()
            filled, sources = self.filler.fill(req, engines, now)
            inputs = route_inputs(req, self.defaults, filled)
        else:
            inputs = route_inputs(req, self.defaults)
        if self.output_learning is not None:
            inputs = corrected_inputs(self.output_learning, inputs, req.request_id)
        if self.calibration is not None:
            return self._answer_calibrated(inputs, req, snapshot.params_id, model, self.calibration, sources)
        model = for_objective(model, req.objective)
        b = model.decide(inputs)
        self.record(b, inputs)
        return encoder_for(type(b)).encode(b, model.name, snapshot.params_id, req.request_id, sources)

    def _answer_calibrated(
        self,
        inputs: RouteInputs,
        req: RouteRequest,
        params_id: str,
        model: DecisionModel,
        cal: CalibrationState,
        sources: Sources | None,
    ) -> bytes:
        """The answer of the calibrated model, with ``calibration``: the corrections in force
        and the raw (uncalibrated) model's TTFT, TPOT and e2e of both paths."""
        served = for_objective(cal.model_for(params_id, model), req.objective)
        model = for_objective(model, req.objective)
        b = served.decide(inputs)
        self.record(b, inputs)
        answer = encoder_for(type(b)).to_dict(b, served.name, params_id, req.request_id, sources)
        if isinstance(model, QueueAwareModel):  # only the queue-aware model is calibrated
            raw = b if served is model else model.decide(inputs)
            if req.request_id is not None:
                cal.remember(req.request_id, inputs, b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms)
            answer["calibration"] = {
                "corrections": cal.corrections.as_dict(),
                "raw": {name: getattr(raw, name) for name in RAW_TERMS},
            }
        return dumps(answer)

    def _answer_batch(self, raw: bytes, scope: Scope) -> bytes:
        reqs = RouteBatchRequest.model_validate_json(raw).requests
        if len(reqs) > self.max_batch:
            raise ValidationError.from_exception_data(
                "RouteBatchRequest",
                [
                    {
                        "type": pydantic_core.PydanticCustomError(
                            "too_long", f"{len(reqs)} items is over the limit of {self.max_batch}"
                        ),
                        "loc": ("requests",),
                        "input": None,
                    }
                ],
            )
        snapshot = self.store.current
        model = snapshot.model
        cal = self.calibration
        if cal is not None:
            model = cal.model_for(snapshot.params_id, model)
        engines, now = self.filler.current()
        inputs: list[RouteInputs] = []
        sources: list[Sources | None] = []
        for i, req in enumerate(reqs):
            if req.names_target:
                filled, where = self.filler.fill(req, engines, now, ("requests", i))
                inputs.append(route_inputs(req, self.defaults, filled))
                sources.append(where)
            else:
                inputs.append(route_inputs(req, self.defaults))
                sources.append(None)
        learning = self.output_learning
        if learning is not None:
            inputs = [corrected_inputs(learning, x, r.request_id) for x, r in zip(inputs, reqs, strict=True)]
        results = []
        decided = decide_inputs(model, inputs, [r.objective for r in reqs])
        for req, one, origin, b in zip(reqs, inputs, sources, decided, strict=True):
            self.record(b, one)
            if cal is not None and req.request_id is not None and isinstance(model, QueueAwareModel):
                cal.remember(req.request_id, one, b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms)
            encoder = encoder_for(type(b))
            results.append(encoder.to_dict(b, model.name, snapshot.params_id, req.request_id, origin))
        return dumps({"results": results, "params_id": snapshot.params_id})


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """Replace ``{"$ref": "#/$defs/X"}`` with X's schema (OpenAPI has no ``$defs`` of its own)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def _schema(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
    schema = model.model_json_schema(mode=mode)
    inlined: dict[str, Any] = _inline_refs(schema, schema.pop("$defs", {}))
    return inlined


def openapi_paths() -> dict[str, Any]:
    """The OpenAPI path items of ``/route`` and ``/route/batch`` (bodies, answers, errors)."""

    def content(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return {"content": {JSON: {"schema": _schema(model, mode)}}}

    errors = {
        str(code): {"description": why, **content(ErrorResponse, "serialization")}
        for code, why in (
            (413, "the request body is over PDROUTE_MAX_BODY_BYTES"),
            (422, "invalid input; `error` names the field and why"),
            (500, "an unexpected error, logged with the request_id"),
        )
    }
    paths = {}
    for path, request, response, summary in (
        ("/route", RouteRequest, RouteResponse, "Decide one request: collocated or disaggregated, and why."),
        (
            "/route/batch",
            RouteBatchRequest,
            RouteBatchResponse,
            "Decide many requests in order (up to PDROUTE_MAX_BATCH_REQUESTS).",
        ),
    ):
        paths[path] = {
            "post": {
                "tags": ["route"],
                "summary": summary,
                "operationId": path.strip("/").replace("/", "_"),
                "requestBody": {"required": True, **content(request, "validation")},
                "responses": {
                    "200": {"description": "the decision", **content(response, "serialization")},
                    **errors,
                },
            }
        }
    return paths
