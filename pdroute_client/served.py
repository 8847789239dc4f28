"""``ServedParams``: what ``GET /params`` says the service serves, and the local decision on it.

The body carries the params document, the model's name, its settings (harm weight, SLO margin),
the defaults the service applies to a request's missing fields (with the table of default output
lengths by prompt length, ``pdroute_core.output_defaults``) and, when the service
recalibrates online, the corrections in force (applied here the same way, by
``pdroute_core.calibration.calibrated_model``), and when it learns output lengths
(``PDROUTE_OUTPUT_LEN_LEARNING=correct``) the per-bucket snapshot in force, with which the told
output length is corrected before deciding, as ``/route`` does. The same model code the
service runs (``pdroute_core.routing.build_model``) is built on them, so a local decision equals
the service's answer for the same request, bit for bit (``conformance/vectors-v1.json`` and
``tests/pdroute_client`` check it against a running service).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdroute_client.answer import LOCAL, Answer
from pdroute_client.query import RouteQuery
from pdroute_core.calibration import TERMS, Corrections, calibrated_model
from pdroute_core.errors import InvalidParams
from pdroute_core.output_defaults import InvalidOutputTable, OutputLenDefaults
from pdroute_core.output_learning import InvalidOutputLearning, OutputLenSnapshot
from pdroute_core.params import CostModelParams, params_from_dict
from pdroute_core.routing import DecisionModel, RouteColumns, RouteInputs, build_model, term_names
from pdroute_core.routing.objective import LATENCY, OBJECTIVES
from pdroute_core.routing.queue_aware import FIRST_TOKEN_DECODE, QueueAwareModel, parse_first_token

_TOP_LEVEL_TERMS = (
    "meets_slo",
    "predicted_lateness_ms",
    "admission",
    "objective",
)  # as app.http.route_codec: shown beside the decision


def _number(body: Mapping[str, Any], name: str) -> float:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParams(f"/params {name}: expected a finite number, got {value!r}")
    return value


def _optional_number(body: Mapping[str, Any], name: str) -> float | None:
    return None if body.get(name) is None else _number(body, name)


def corrections_of(body: Mapping[str, Any]) -> Corrections | None:
    """The calibration corrections ``/params`` says are in force, or None when off or absent."""
    section = body.get("calibration")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise InvalidParams("/params calibration: expected an object")
    if section.get("enabled") is not True:
        return None
    raw = section.get("corrections")
    if not isinstance(raw, dict):
        raise InvalidParams("/params calibration.corrections: expected an object")
    values: dict[str, float] = {}
    for term in TERMS:
        value = _number(raw, term) if term in raw else 1.0
        if value <= 0:
            raise InvalidParams(f"/params calibration.corrections.{term}: must be > 0, got {value!r}")
        values[term] = float(value)
    return Corrections(**values)


def output_table_of(body: Mapping[str, Any], default: int) -> OutputLenDefaults:
    """The default output lengths by prompt length ``/params`` states (none when absent: an older service)."""
    value = body.get("default_output_len_by_prompt")
    if value is None:
        return OutputLenDefaults(default)
    try:
        return OutputLenDefaults.from_json(default, value, "/params default_output_len_by_prompt")
    except InvalidOutputTable as exc:
        raise InvalidParams(str(exc)) from None


def output_learning_of(body: Mapping[str, Any]) -> OutputLenSnapshot | None:
    """The output-length snapshot ``/params`` says is in force, or None when off or absent (an
    older service); an unknown mode is refused (the local tier could not decide as the service)."""
    section = body.get("output_len_learning")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise InvalidParams("/params output_len_learning: expected an object")
    mode = section.get("mode")
    if mode == "off":
        return None
    if mode != "correct":
        raise InvalidParams(f"/params output_len_learning.mode: expected 'off' or 'correct', got {mode!r}")
    try:
        return OutputLenSnapshot.from_json(section, "/params output_len_learning")
    except InvalidOutputLearning as exc:
        raise InvalidParams(str(exc)) from None


@dataclass(frozen=True)
class ServedParams:
    """One ``/params`` snapshot with the decision model built on it."""

    params: CostModelParams
    params_id: str
    model: DecisionModel
    default_output_len: int
    default_ttft_slo_ms: float | None
    default_tpot_slo_ms: float | None
    etag: str | None  # the answer's ETag, sent back as If-None-Match
    # default_output_len_by_prompt; None when off or from an older service without it.
    output_table: OutputLenDefaults | None = None
    # output_len_learning's snapshot in force; None when off or from an older service without it.
    output_learning: OutputLenSnapshot | None = None

    @property
    def output_len(self) -> OutputLenDefaults | int:
        """What a query without predicted_output_len is told: the table, else default_output_len."""
        return self.default_output_len if self.output_table is None else self.output_table

    @classmethod
    def from_body(cls, body: Any, etag: str | None = None) -> ServedParams:
        """Parse a ``/params`` body; raise ``InvalidParams`` when it is not one.

        The params document must hash to the ``params_id`` the body states: a body damaged on
        the way is refused rather than decided on.
        """
        if not isinstance(body, dict):
            raise InvalidParams("/params: not a JSON object")
        params = params_from_dict(body.get("params"))
        if params.params_id != body.get("params_id"):
            raise InvalidParams(
                f"/params: params hash to {params.params_id}, the body says {body.get('params_id')!r}"
            )
        name = body.get("model")
        if not isinstance(name, str):
            raise InvalidParams("/params model: expected a string")
        output_len = body.get("default_output_len")
        if isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1:
            raise InvalidParams(f"/params default_output_len: expected an integer >= 1, got {output_len!r}")
        objective = body.get("objective", LATENCY)  # a service from before objectives: latency
        if objective not in OBJECTIVES:
            raise InvalidParams(
                f"/params objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}"
            )
        try:  # a service from before it: the decode engine's
            first_token = parse_first_token(body.get("first_token", FIRST_TOKEN_DECODE))
        except ValueError as exc:
            raise InvalidParams(f"/params {exc}") from None
        model = build_model(
            name,
            params,
            harm_weight=_number(body, "harm_weight"),
            slo_margin=_number(body, "slo_margin"),
            objective=objective,
            first_token=first_token,
        )
        table = output_table_of(body, output_len)
        corrections = corrections_of(body)
        learning = output_learning_of(body)
        if corrections is not None and isinstance(model, QueueAwareModel):
            model = calibrated_model(model, corrections)  # as the service decides (app.learners.calibration)
        return cls(
            params=params,
            params_id=params.params_id,
            model=model,
            default_output_len=output_len,
            default_ttft_slo_ms=_optional_number(body, "default_ttft_slo_ms"),
            default_tpot_slo_ms=_optional_number(body, "default_tpot_slo_ms"),
            etag=etag,
            output_table=table if table.by_prompt else None,
            output_learning=learning,
        )

    def decide(self, query: RouteQuery, why: str) -> Answer:
        """The local tier's answer to ``query`` (``why`` says why the remote tier did not answer).

        Raises ``pdroute_core.errors.PdrouteError`` when the model cannot decide the request.
        """
        inputs = self.inputs(query)
        return self._answer(self._model(query.objective).decide(inputs), query, why)

    def decide_many(self, queries: Sequence[RouteQuery], why: str) -> list[Answer]:
        """The local answers to many queries (the vectorised model; the same answers as ``decide``)."""
        rows: list[Any] = [None] * len(queries)
        objectives = [q.objective for q in queries]
        for objective in dict.fromkeys(objectives):  # one vectorised call per objective, order kept
            where = [i for i, o in enumerate(objectives) if o == objective]
            columns = RouteColumns.from_inputs([self.inputs(queries[i]) for i in where])
            for i, b in zip(where, self._model(objective).decide_many(columns).rows(), strict=True):
                rows[i] = b
        return [self._answer(b, q, why) for b, q in zip(rows, queries, strict=True)]

    def _model(self, objective: str | None) -> DecisionModel:
        """The model for a query's objective (``app.routes.route.for_objective``)."""
        if objective is None or not isinstance(self.model, QueueAwareModel):
            return self.model
        return self.model.with_objective(objective)

    def inputs(self, query: RouteQuery) -> RouteInputs:
        """The model's inputs for ``query`` as ``/route`` builds them: the service's defaults
        applied, then the told output length corrected by the output-length snapshot in force
        (``app.routes.route.corrected_inputs``)."""
        return query.inputs(
            self.output_len, self.default_ttft_slo_ms, self.default_tpot_slo_ms, self.output_learning
        )

    def _answer(self, b: Any, query: RouteQuery, why: str) -> Answer:
        terms = term_names(type(b))
        return Answer(
            decision=b.decision,
            reason=b.reason,
            tier=LOCAL,
            why=why,
            model=self.model.name,
            params_id=self.params_id,
            t_collocated_ms=b.t_collocated_ms,
            t_disaggregated_ms=b.t_disaggregated_ms,
            meets_slo=b.meets_slo if "meets_slo" in terms else None,
            predicted_lateness_ms=b.predicted_lateness_ms if "predicted_lateness_ms" in terms else None,
            admission=b.admission if "admission" in terms else None,
            objective=b.objective if "objective" in terms else None,
            assumed=tuple(b.assumed),
            breakdown={n: getattr(b, n) for n in terms if n not in _TOP_LEVEL_TERMS},
            request_id=query.request_id,
        )
