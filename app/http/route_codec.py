"""The ``/route`` answer, derived from the deciding model's breakdown dataclass.

A breakdown (``pdroute_core.routing.types``) starts with the fields every model shares
(``HEAD_FIELDS``: decision, reason, both predicted latencies, the assumed inputs); the rest are
the model's own terms (``term_names``). The answer puts the head fields and the model's name at
the top level, flags such as ``meets_slo`` beside them, and every other term under
``breakdown``, in the dataclass's field order::

    {"decision", "reason", "model", "t_collocated_ms", "t_disaggregated_ms", "assumed",
     ["meets_slo",] "breakdown": {<terms>}, "params_id", "request_id"}

A term added to a model's breakdown reaches the answer (and the OpenAPI schema, through
``app.schemas.route``) with no list here to keep in step.
"""

from __future__ import annotations

from typing import Any

from app.http.json_codec import dumps
from pdroute_core.routing import term_names

# Terms shown beside the decision rather than under "breakdown": what a gateway acts on.
TOP_LEVEL_TERMS = ("meets_slo", "predicted_lateness_ms", "admission", "objective")


def breakdown_terms(breakdown_type: type[Any]) -> tuple[str, ...]:
    """The terms of ``breakdown_type`` that go under ``breakdown`` in the answer."""
    return tuple(n for n in term_names(breakdown_type) if n not in TOP_LEVEL_TERMS)


class RouteEncoder:
    """Turns one breakdown of a given dataclass type into the ``/route`` answer."""

    def __init__(self, breakdown_type: type[Any]) -> None:
        terms = term_names(breakdown_type)
        self.flags = tuple(n for n in terms if n in TOP_LEVEL_TERMS)
        self.terms = breakdown_terms(breakdown_type)

    def to_dict(
        self,
        b: Any,
        model: str,
        params_id: str,
        request_id: str | None,
        input_sources: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The answer as a dict (JSON-ready: tuples serialise as arrays); ``input_sources`` (where
        each load input came from) is added when the request named an engine target."""
        fields = b.__dict__  # a breakdown is a dataclass without slots: its fields, in one dict
        answer: dict[str, Any] = {
            "decision": fields["decision"],
            "reason": fields["reason"],
            "model": model,
            "t_collocated_ms": fields["t_collocated_ms"],
            "t_disaggregated_ms": fields["t_disaggregated_ms"],
            "assumed": fields["assumed"],
        }
        for name in self.flags:
            answer[name] = fields[name]
        answer["breakdown"] = {name: fields[name] for name in self.terms}
        answer["params_id"] = params_id
        answer["request_id"] = request_id
        if input_sources is not None:
            answer["input_sources"] = input_sources
        return answer

    def encode(
        self,
        b: Any,
        model: str,
        params_id: str,
        request_id: str | None,
        input_sources: dict[str, Any] | None = None,
    ) -> bytes:
        """The answer as JSON bytes (``app.http.json_codec``)."""
        return dumps(self.to_dict(b, model, params_id, request_id, input_sources))


_ENCODERS: dict[type[Any], RouteEncoder] = {}


def encoder_for(breakdown_type: type[Any]) -> RouteEncoder:
    """The encoder of a breakdown type, built once per type (a handful of types per process)."""
    encoder = _ENCODERS.get(breakdown_type)
    if encoder is None:
        encoder = _ENCODERS[breakdown_type] = RouteEncoder(breakdown_type)
    return encoder
