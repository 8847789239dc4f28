"""Arbitrary JSON at the request endpoints over real HTTP: a 2xx or a 4xx, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app.conftest import LiveServer

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
]
# Mostly well-formed shapes with odd values, so validation is exercised past the first field.
_route_like = st.dictionaries(st.sampled_from(_FIELDS), _scalars | st.integers(0, 10**7), max_size=6)
_bodies = _json | _route_like | st.builds(lambda rs: {"requests": rs}, st.lists(_route_like, max_size=5))


@pytest.mark.parametrize("path", ["/route", "/route/batch", "/plan", "/plan/grid"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies)
def test_arbitrary_json_never_gets_a_server_error(live_server: LiveServer, path: str, body: Any) -> None:
    r = httpx.post(f"{live_server.url}{path}", content=json.dumps(body), timeout=30)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert r.json()["error"]
