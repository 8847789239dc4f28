"""``from_fields``: the same frozen instance as the constructor, for every class built with it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings

from pdroute_core.params import params_from_dict
from pdroute_core.records import from_fields
from pdroute_core.routing import AnalyticalCostModel, RouteInputs
from tests.factories import TEST_PARAMS, qa_model, route_inputs_st


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    label: str
    tags: tuple[str, ...] = ()


def test_the_instance_is_the_constructors() -> None:
    built = from_fields(Point, {"x": 1.5, "label": "a", "tags": ("t",)})
    made = Point(1.5, "a", ("t",))
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert dataclasses.asdict(built) == dataclasses.asdict(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.x = 2.0  # type: ignore[misc]  # the point: assignment must raise


def test_a_missing_field_is_not_papered_over() -> None:
    built = from_fields(Point, {"x": 1.5, "tags": ()})  # "label" (no default) forgotten
    with pytest.raises(AttributeError):
        _ = built == Point(1.5, "a")
    # A field with a default reads as the default, as the constructor would have set it.
    assert from_fields(Point, {"x": 1.5, "label": "a"}).tags == ()


def _assert_constructed(obj: Any) -> None:
    """``obj`` holds exactly its class's fields, in order, and equals the constructor's."""
    cls = type(obj)
    names = tuple(f.name for f in dataclasses.fields(cls))
    assert tuple(vars(obj)) == names
    assert obj == cls(**vars(obj))


@settings(max_examples=150, deadline=None)
@given(route_inputs_st)
def test_every_breakdown_is_built_whole(x: RouteInputs) -> None:
    _assert_constructed(AnalyticalCostModel(params_from_dict(TEST_PARAMS)).decide(x))
    _assert_constructed(qa_model(harm_weight=1.0).decide(x))
