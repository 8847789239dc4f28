"""``app.http.json_codec``: the bytes pydantic-core would write, for every finite answer."""

from __future__ import annotations

import math
from typing import Any

import pydantic_core
from hypothesis import given, settings
from hypothesis import strategies as st

from app.http.json_codec import dumps

FINITE = st.floats(allow_nan=False, allow_infinity=False)
LEAVES = FINITE | st.integers(-(2**53), 2**53) | st.booleans() | st.none() | st.text(max_size=20)
ANSWERS = st.recursive(
    LEAVES,
    lambda inner: (
        st.dictionaries(st.text(max_size=12), inner, max_size=6)
        | st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(ANSWERS)
def test_the_bytes_are_pydantic_cores(answer: Any) -> None:
    assert dumps(answer) == pydantic_core.to_json(answer)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_reads_back_the_same(x: float) -> None:
    assert float(dumps(x)) == x


def test_a_non_finite_number_is_valid_json_null() -> None:
    assert dumps({"a": math.inf, "b": -math.inf, "c": math.nan}) == b'{"a":null,"b":null,"c":null}'
