"""The table of the request's fields agrees with every declared view of a request, field by field:
the service's schema, the model's ``RouteInputs``, the client's ``RouteQuery``, the simulator's view."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas.route import RouteRequest
from pdroute_client import RouteQuery
from pdroute_core.route_fields import FIELD_NAMES, FIELDS, ROUTE_FIELDS, RouteField
from pdroute_core.routing import RouteInputs
from pdroute_core.routing.resolve import resolve
from solver.sim import RouteView


def _row(kind: typing.Literal["int", "float"], minimum: float, maximum: float, **kw: Any) -> RouteField:
    return RouteField("x", kind, minimum, maximum, "doc", **kw)


SCHEMA = RouteRequest.model_json_schema()["properties"]


def _numeric(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema of a field's value (an optional field's non-null branch)."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert len(branches) == 1
    branch: dict[str, Any] = branches[0]
    return branch


def test_every_numeric_field_of_the_schema_has_a_bound() -> None:
    numeric = {name for name, prop in SCHEMA.items() if _numeric(prop)["type"] in ("integer", "number")}
    assert numeric == set(FIELD_NAMES)
    assert [name for name in RouteRequest.model_fields if name in FIELDS] == list(FIELD_NAMES)


@pytest.mark.parametrize("name", FIELD_NAMES)
def test_the_schema_enforces_the_table(name: str) -> None:
    bound = FIELDS[name]
    assert SCHEMA[name]["description"] == bound.doc
    value = _numeric(SCHEMA[name])
    assert value["type"] == ("integer" if bound.kind == "int" else "number")
    assert value["maximum"] == bound.maximum
    key = "exclusiveMinimum" if bound.exclusive_min else "minimum"
    assert value[key] == bound.minimum
    in_schema = name in RouteRequest.model_json_schema().get("required", [])
    if name in TARGET_FILLED:
        # Required unless the request names an engine target to fill it from: a model validator,
        # not the JSON schema's list. The client names no targets, so it always requires it.
        assert bound.required and not in_schema
        with pytest.raises(ValidationError, match=name):
            RouteRequest.model_validate({"prompt_len": 10})
    else:
        assert in_schema == bound.required


TARGET_FILLED = {"system_load"}


@pytest.mark.parametrize(
    ("bound", "value", "problem"),
    [
        (_row("int", 1, 10), True, "expected an integer, got bool"),
        (_row("int", 1, 10), 2.0, "expected an integer, got 2.0"),
        (_row("int", 1, 10), "3", "expected an integer, got str"),
        (_row("int", 1, 10), 0, "must be >= 1, got 0"),
        (_row("int", 1, 10), 11, "must be <= 10, got 11"),
        (_row("float", 0, 10, exclusive_min=True), 0.0, "must be > 0, got 0.0"),
        (_row("float", 0, 10, exclusive_min=True), float("nan"), "must be finite, got nan"),
        (_row("float", 0, 10, exclusive_min=True), float("inf"), "must be finite, got inf"),
    ],
)
def test_problems(bound: RouteField, value: object, problem: str) -> None:
    assert bound.problem(value) == problem


@pytest.mark.parametrize(("bound", "value"), [(_row("int", 1, 10), 10), (_row("float", 0, 10), 3)])
def test_accepted(bound: RouteField, value: object) -> None:
    assert bound.problem(value) is None


def _kind(annotation: Any) -> str:
    """``int`` or ``float`` from a field's annotation (``int | None`` and its string form alike)."""
    text = str(annotation)
    return "float" if "float" in text else "int"


def test_route_inputs_are_the_table_in_order() -> None:
    fields = dataclasses.fields(RouteInputs)
    assert tuple(f.name for f in fields) == FIELD_NAMES
    for f in fields:
        assert _kind(f.type) == FIELDS[f.name].kind, f.name
    # The design inputs with a default: RouteInputs' own default is the table's.
    for f in fields[:5]:
        if f.default is not dataclasses.MISSING:
            assert f.default == FIELDS[f.name].default, f.name


def test_the_client_query_has_every_field_with_its_type() -> None:
    hints = typing.get_type_hints(RouteQuery)
    assert [name for name in hints if name in FIELDS] == sorted(FIELD_NAMES, key=list(hints).index)
    assert set(FIELD_NAMES) <= set(hints)
    for name in FIELD_NAMES:
        assert _kind(hints[name]) == FIELDS[name].kind, name


def test_the_simulators_view_carries_every_input_by_its_name() -> None:
    assert set(FIELD_NAMES) <= set(RouteView._fields)


def test_defaults_resolve_as_the_table_states() -> None:
    v = resolve(RouteInputs(1000, 100, 4, 2, 256))
    assert (v.prefill_queue_requests, v.prefill_pool_gpus, v.prefill_running_requests) == (0.0, 1.0, 0.0)
    assert v.prefill_queue_tokens == 0.0 and v.cached_prompt_tokens == 0.0
    assert v.colloc_context_tokens == 4 * 1000 and v.decode_context_tokens == 2 * 1000
    assert v.ttft_slo_ms == math.inf and v.colloc_prefill_tokens_per_s == 0.0
    assert math.isnan(v.prefill_running_tokens)  # no default: "not reported"
    queued = resolve(RouteInputs(1000, 100, 4, 2, 256, prefill_queue_requests=3, prefill_pool_gpus=2))
    assert (queued.prefill_queue_tokens, queued.prefill_running_requests) == (3000.0, 2.0)
    with pytest.raises(AttributeError, match="no route input"):
        _ = v.prefill_queue_depth


class _Spy:
    """Records the fields a default expression reads (each read as 1.0)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __getattr__(self, name: str) -> float:
        self.seen.append(name)
        return 1.0


def test_every_default_expression_reads_only_fields_resolved_before_it() -> None:
    # Expressions are applied after the numbers: one reading another expression would see NaN.
    numbers = {f.name for f in ROUTE_FIELDS if not callable(f.default)}
    for f in ROUTE_FIELDS:
        if callable(f.default):
            spy = _Spy()
            f.default(spy)
            assert spy.seen and set(spy.seen) <= numbers, f.name
