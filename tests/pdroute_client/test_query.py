"""The client's argument checks agree with the service's request schema, value for value."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.schemas.route import RouteRequest
from pdroute_client import InvalidArgument, RouteQuery
from pdroute_core.request_defaults import RouteDefaults, route_inputs
from pdroute_core.route_fields import FIELD_NAMES

# Values around every bound, of every type a gateway might pass by mistake.
EDGES = st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        255,
        256,
        1_000_000,
        1_000_001,
        16_777_216,
        16_777_217,
        2**44,
        2**44 + 1,
        100_000,
        100_001,
        0.0,
        0.5,
        1.0,
        86_400_000.0,
        86_400_000.5,
        float("nan"),
        float("inf"),
        True,
        False,
        "3",
        None,
    ]
)
REQUESTS = st.fixed_dictionaries(
    {"prompt_len": EDGES, "system_load": EDGES},
    optional={name: EDGES for name in FIELD_NAMES if name not in ("prompt_len", "system_load")},
)


def _service_accepts(body: dict[str, Any]) -> bool:
    try:
        RouteRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError:
        return False
    return True


def _client_accepts(body: dict[str, Any]) -> bool:
    try:
        RouteQuery.from_mapping(body)
    except InvalidArgument:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(REQUESTS)
def test_the_client_accepts_exactly_what_the_service_accepts(body: dict[str, Any]) -> None:
    # None means "not given" to the client; the service's JSON would leave the field out.
    assert _client_accepts(body) == _service_accepts(body)


@settings(max_examples=200, deadline=None)
@given(REQUESTS, st.sampled_from([None, 300.0]), st.sampled_from([None, 25.0]))
def test_the_defaults_are_applied_as_the_service_applies_them(
    body: dict[str, Any], ttft: float | None, tpot: float | None
) -> None:
    if not _service_accepts(body):
        return
    req = RouteRequest.model_validate({k: v for k, v in body.items() if v is not None})
    query = RouteQuery.from_mapping(body)
    assert query.inputs(77, ttft, tpot) == route_inputs(req, RouteDefaults(77, ttft, tpot))
    assert RouteRequest.model_validate(query.body()) == req  # the body sent is the request meant


def test_objective_is_checked_as_the_service_checks_it() -> None:
    assert RouteQuery(prompt_len=10, system_load=0, objective="goodput").body()["objective"] == "goodput"
    try:
        RouteQuery(prompt_len=10, system_load=0, objective="fast")
    except InvalidArgument as exc:
        assert exc.field == "objective" and "latency, goodput" in exc.problem
    else:
        raise AssertionError("objective 'fast' was accepted")
    try:
        RouteRequest.model_validate({"prompt_len": 10, "system_load": 0, "objective": "fast"})
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("objective",)
    else:
        raise AssertionError("the service's schema accepted objective 'fast'")
