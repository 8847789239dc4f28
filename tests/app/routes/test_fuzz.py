"""Arbitrary JSON at the request endpoints over real HTTP: a 2xx or a 4xx, never a 5xx."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdroute_core.bounds import MAX_LOAD, MAX_PROMPT_LEN, MAX_SLO_MS, MAX_TOKENS
from pdroute_core.routing import OPTIONAL_INPUTS, UNLISTED_INPUTS
from tests.app.conftest import LiveServer


def _refuse(token: str) -> Any:
    raise AssertionError(f"{token} in an answer: not valid JSON")


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=12,
)
_FIELDS = [
    "prompt_len",
    "predicted_output_len",
    "system_load",
    "decode_batch_size",
    "chunk_size",
    "request_id",
    *OPTIONAL_INPUTS,
    *UNLISTED_INPUTS,
]
# Mostly well-formed shapes with odd values, so validation is exercised past the first field:
# in-range values up to each bound (the model's arithmetic at its extremes), and just beyond.
_values = (
    _scalars
    | st.integers(0, 10**7)
    | st.sampled_from([0, 1, MAX_PROMPT_LEN, MAX_PROMPT_LEN + 1, MAX_LOAD, MAX_TOKENS, MAX_TOKENS + 1])
    | st.floats(min_value=1e-300, max_value=MAX_SLO_MS)
)
_route_like = st.dictionaries(st.sampled_from(_FIELDS), _values, max_size=len(_FIELDS))
# Always decidable (the two required fields present), the rest arbitrary.
_decidable = st.builds(
    lambda extra, L, load: {**extra, "prompt_len": L, "system_load": load},
    _route_like,
    st.integers(1, MAX_PROMPT_LEN),
    st.integers(0, MAX_LOAD),
)
_bodies = (
    _json
    | _route_like
    | _decidable
    | st.builds(lambda rs: {"requests": rs}, st.lists(_route_like | _decidable, max_size=5))
)


@pytest.fixture(params=["design", "queue-aware"])
def any_model_server(
    request: pytest.FixtureRequest,
    make_server: Callable[..., LiveServer],
    params_file: Path,
    queue_aware_params_file: Path,
) -> LiveServer:
    """The service deciding with each model (the queue-aware one reads every new field)."""
    path = queue_aware_params_file if request.param == "queue-aware" else params_file
    return make_server(params_path=path, watch_params=False)


@pytest.mark.parametrize("path", ["/plan", "/plan/grid"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies)
def test_arbitrary_json_never_gets_a_server_error(live_server: LiveServer, path: str, body: Any) -> None:
    _check(live_server, path, body)


@pytest.mark.parametrize("path", ["/route", "/route/batch"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies)
def test_arbitrary_json_at_route_never_gets_a_server_error(
    any_model_server: LiveServer, path: str, body: Any
) -> None:
    _check(any_model_server, path, body)


def _check(server: LiveServer, path: str, body: Any) -> None:
    r = httpx.post(f"{server.url}{path}", content=json.dumps(body), timeout=30)
    assert r.status_code < 500, r.text
    answer = r.json()  # JSON whatever the status (no NaN or Infinity: strict parse below)
    json.loads(r.text, parse_constant=_refuse)
    if r.status_code >= 400:
        assert answer["error"] and answer["request_id"]
