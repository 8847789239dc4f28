"""``from_fields``: the same frozen instance as the constructor, for every class built with it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.params import params_from_dict
from pdroute_core.records import from_fields
from pdroute_core.routing import AnalyticalCostModel, QueueAwareModel, RouteInputs
from tests.conftest import TEST_PARAMS

FORMS = {
    "prefill_floor_ms": 12.0,
    "prefill_ms_per_token": 0.02,
    "prefill_knee_tokens": 100.0,
    "decode_base_ms": 5.0,
    "decode_ms_per_seq": 0.01,
    "decode_ms_per_context_token": 1e-5,
    "chunk_ms_per_token": 0.01,
    "chunk_ms_per_token_sq": 1e-6,
    "chunk_ms_per_token_seq": 1e-4,
}


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


INPUTS = st.builds(
    RouteInputs,
    prompt_len=st.integers(1, 100_000),
    predicted_output_len=st.integers(1, 8_192),
    system_load=st.integers(0, 512),
    decode_batch_size=st.integers(0, 512),
    chunk_size=st.integers(1, 8_192),
    prefill_queue_requests=st.none() | st.integers(0, 64),
    pending_prefill_tokens=st.none() | st.integers(0, 100_000),
    colloc_context_tokens=st.none() | st.integers(0, 10**6),
    ttft_slo_ms=st.none() | st.floats(1.0, 1e5),
    tpot_slo_ms=st.none() | st.floats(1.0, 1e3),
    colloc_prefill_tokens_per_s=st.none() | st.floats(0.0, 1e6),
)


@settings(max_examples=150, deadline=None)
@given(INPUTS)
def test_every_breakdown_is_built_whole(x: RouteInputs) -> None:
    design = AnalyticalCostModel(params_from_dict(TEST_PARAMS))
    queue_aware = QueueAwareModel(
        params_from_dict({**TEST_PARAMS, "schema_version": 2, "queue_aware": FORMS})
    )
    _assert_constructed(design.decide(x))
    _assert_constructed(queue_aware.decide(x))
