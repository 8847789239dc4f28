"""The one resolution of a request's missing inputs: the defaults of ``pdroute_core.route_fields``.

``resolve`` gives every input of one ``RouteInputs`` as a float, ``resolve_columns`` every
column of ``RouteColumns`` as a float array: a reported value as it is, a missing one at its
field's ``default`` (a number, or an expression of other fields, evaluated by the same
operations on floats and on columns, so both give the same bits). A field without a default
(``prefill_running_tokens``) stays NaN: "not reported", which the model reads as such. Every
default expression reads only required fields or fields with a number for a default, so the
numbers are applied first and the expressions after.
"""

from __future__ import annotations

import math
from typing import Generic, TypeVar

import numpy as np

from pdroute_core.route_fields import DESIGN_INPUTS, ROUTE_FIELDS
from pdroute_core.routing.types import FloatArray, RouteColumns, RouteInputs

V = TypeVar("V", float, FloatArray)

# (name, number) for the fields defaulting to a number (NaN: none), then (name, expression).
_NUMBERS = tuple(
    (f.name, math.nan if f.default is None else float(f.default))
    for f in ROUTE_FIELDS
    if not callable(f.default)
)
_EXPRESSIONS = tuple((f.name, f.default) for f in ROUTE_FIELDS if callable(f.default))


class Resolved(Generic[V]):
    """Every input of ``ROUTE_FIELDS`` by name: floats for one request, float arrays for many."""

    def __init__(self, values: dict[str, V]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> V:  # the fields, set in __init__; anything else is an error
        raise AttributeError(f"no route input named {name!r}")


def resolve(x: RouteInputs) -> Resolved[float]:
    """``x``'s inputs as floats, each missing one at its default (module docstring)."""
    given = x.__dict__
    v = Resolved(
        {name: default if (value := given[name]) is None else float(value) for name, default in _NUMBERS}
    )
    for name, rule in _EXPRESSIONS:
        value = given[name]
        v.__dict__[name] = rule(v) if value is None else float(value)
    return v


def resolve_columns(cols: RouteColumns) -> Resolved[FloatArray]:
    """``cols`` as float arrays, each missing (NaN) value at its default, as ``resolve``."""
    values: dict[str, FloatArray] = {name: getattr(cols, name) for name in DESIGN_INPUTS}
    for name, default in _NUMBERS:
        if name not in values:
            col = cols.optional[name]
            values[name] = col if math.isnan(default) else np.where(np.isnan(col), default, col)
    v = Resolved(values)
    for name, rule in _EXPRESSIONS:
        col = cols.optional[name]
        v.__dict__[name] = np.where(np.isnan(col), rule(v), col)
    return v
