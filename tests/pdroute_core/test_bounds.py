"""The bounds table agrees with the service's request schema, field by field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas import RouteRequest
from pdroute_core.bounds import ROUTE_FIELDS, FieldBound

SCHEMA = RouteRequest.model_json_schema()["properties"]


def _numeric(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema of a field's value (an optional field's non-null branch)."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert len(branches) == 1
    branch: dict[str, Any] = branches[0]
    return branch


def test_every_numeric_field_of_the_schema_has_a_bound() -> None:
    numeric = {name for name, prop in SCHEMA.items() if _numeric(prop)["type"] in ("integer", "number")}
    assert numeric == set(ROUTE_FIELDS)


@pytest.mark.parametrize("name", sorted(ROUTE_FIELDS))
def test_the_schema_enforces_the_table(name: str) -> None:
    bound = ROUTE_FIELDS[name]
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
        (FieldBound("int", 1, 10), True, "expected an integer, got bool"),
        (FieldBound("int", 1, 10), 2.0, "expected an integer, got 2.0"),
        (FieldBound("int", 1, 10), "3", "expected an integer, got str"),
        (FieldBound("int", 1, 10), 0, "must be >= 1, got 0"),
        (FieldBound("int", 1, 10), 11, "must be <= 10, got 11"),
        (FieldBound("float", 0, 10, exclusive_min=True), 0.0, "must be > 0, got 0.0"),
        (FieldBound("float", 0, 10, exclusive_min=True), float("nan"), "must be finite, got nan"),
        (FieldBound("float", 0, 10, exclusive_min=True), float("inf"), "must be finite, got inf"),
    ],
)
def test_problems(bound: FieldBound, value: object, problem: str) -> None:
    assert bound.problem(value) == problem


@pytest.mark.parametrize(
    ("bound", "value"), [(FieldBound("int", 1, 10), 10), (FieldBound("float", 0, 10), 3)]
)
def test_accepted(bound: FieldBound, value: object) -> None:
    assert bound.problem(value) is None
