"""``/route`` and ``/route/batch`` over real HTTP: answers match the model, bad input is a 4xx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.http.route_codec import encoder_for
from app.schemas.route import RouteResponse
from pdroute_core.params import params_from_dict
from pdroute_core.routing import term_names
from pdroute_core.routing.design import AnalyticalCostModel
from tests.app.conftest import LiveServer
from tests.factories import TEST_PARAMS

MODEL = AnalyticalCostModel(params_from_dict(TEST_PARAMS))


@pytest.fixture
def any_server(live_server: LiveServer) -> LiveServer:
    """The service (one /route path: the name is kept for the tests written against two)."""
    return live_server


def test_route_matches_the_cost_model(any_server: LiveServer) -> None:
    with any_server.client() as client:
        r = client.post(
            "/route",
            json={"prompt_len": 1024, "predicted_output_len": 200, "system_load": 8, "request_id": "abc"},
        )
    assert r.status_code == 200
    body = r.json()
    expected = MODEL.explain(1024, 200, 8, 1, 256)
    assert body["decision"] == expected.decision
    assert body["t_collocated_ms"] == expected.t_collocated_ms
    assert body["t_disaggregated_ms"] == expected.t_disaggregated_ms
    assert body["breakdown"] == {
        "prefill_ms": expected.prefill_ms,
        "transfer_ms": expected.transfer_ms,
        "interference_ms": expected.interference_ms,
        "decode_collocated_ms": expected.decode_collocated_ms,
        "decode_disaggregated_ms": expected.decode_disaggregated_ms,
    }
    assert body["params_id"] == MODEL.params.params_id
    assert body["request_id"] == "abc"
    # The test params are schema 1: the design's model decides, assuming nothing.
    assert body["model"] == "design"
    assert body["reason"] == expected.reason
    assert body["assumed"] == []
    assert "meets_slo" not in body


def test_route_defaults(make_server: Any, params_file: Any) -> None:
    server = make_server(params_path=params_file, watch_params=False, default_output_len=77)
    with server.client() as client:
        body = client.post("/route", json={"prompt_len": 100, "system_load": 0}).json()
    expected = MODEL.explain(100, 77, 0, 1, 256)
    assert body["t_collocated_ms"] == expected.t_collocated_ms
    assert body["decision"] == "collocated"  # no load: nothing to gain from a transfer


def test_route_parses_json_whatever_the_content_type(live_server: LiveServer) -> None:
    payload = json.dumps({"prompt_len": 10, "system_load": 30})
    with live_server.client() as client:
        r = client.post("/route", content=payload, headers={"content-type": "text/plain"})
    assert r.status_code == 200
    assert r.json()["decision"] == MODEL.route(10, 200, 30)[0]


def test_batch_is_in_order_and_equal_to_single_routes(live_server: LiveServer) -> None:
    reqs = [
        {"prompt_len": L, "predicted_output_len": out, "system_load": load, "decode_batch_size": dbs}
        for L, out, load, dbs in [(1, 1, 0, 0), (512, 50, 3, 1), (4096, 300, 40, 20), (100, 1000, 16, 15)]
    ]
    with live_server.client() as client:
        batch = client.post("/route/batch", json={"requests": reqs}).json()
        singles = [client.post("/route", json=r).json() for r in reqs]
    assert [b["decision"] for b in batch["results"]] == [s["decision"] for s in singles]
    assert batch["results"] == singles
    assert batch["params_id"] == MODEL.params.params_id


def test_batch_limit_from_settings(make_server: Any, params_file: Any) -> None:
    server = make_server(params_path=params_file, watch_params=False, max_batch_requests=3)
    reqs = [{"prompt_len": 10, "system_load": 1}] * 4
    with server.client() as client:
        r = client.post("/route/batch", json={"requests": reqs})
        ok = client.post("/route/batch", json={"requests": reqs[:3]})
    assert r.status_code == 422
    assert "requests" in r.json()["error"] and "limit of 3" in r.json()["error"]
    assert ok.status_code == 200


GOOD = {"prompt_len": 10, "system_load": 1}
BAD_INPUTS: list[tuple[str, Any, int, str]] = [
    ("missing prompt_len", {"system_load": 1}, 422, "prompt_len"),
    ("missing system_load", {"prompt_len": 1}, 422, "system_load"),
    ("zero prompt_len", {**GOOD, "prompt_len": 0}, 422, "prompt_len"),
    ("negative prompt_len", {**GOOD, "prompt_len": -5}, 422, "prompt_len"),
    ("negative load", {**GOOD, "system_load": -1}, 422, "system_load"),
    ("zero output", {**GOOD, "predicted_output_len": 0}, 422, "predicted_output_len"),
    ("negative decode batch", {**GOOD, "decode_batch_size": -1}, 422, "decode_batch_size"),
    ("zero chunk", {**GOOD, "chunk_size": 0}, 422, "chunk_size"),
    ("float prompt_len", {**GOOD, "prompt_len": 10.5}, 422, "prompt_len"),
    ("integral float", {**GOOD, "prompt_len": 10.0}, 422, "prompt_len"),
    ("string number", {**GOOD, "system_load": "3"}, 422, "system_load"),
    ("bool", {**GOOD, "system_load": True}, 422, "system_load"),
    ("null prompt", {**GOOD, "prompt_len": None}, 422, "prompt_len"),
    ("huge prompt", {**GOOD, "prompt_len": 10**30}, 422, "prompt_len"),
    ("huge load", {**GOOD, "system_load": 2**63}, 422, "system_load"),
    ("unknown field", {**GOOD, "promptlen": 3}, 422, "promptlen"),
    ("long request id", {**GOOD, "request_id": "x" * 1000}, 422, "request_id"),
    ("array body", [GOOD], 422, "body"),
    ("string body", "hello", 422, "body"),
]


@pytest.mark.parametrize(("case", "payload", "status", "field"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_route_input(any_server: LiveServer, case: str, payload: Any, status: int, field: str) -> None:
    with any_server.client() as client:
        r = client.post("/route", content=json.dumps(payload))
    assert r.status_code == status, r.text
    assert field in r.json()["error"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "JSON"),
        (b"{not json", "JSON"),
        (b"\xff\xfe\x00", "JSON"),
        (b"NaN", "body"),
        (b'{"prompt_len": 1e400, "system_load": 1}', "prompt_len"),
    ],
)
def test_non_json_bodies(any_server: LiveServer, body: bytes, needle: str) -> None:
    with any_server.client() as client:
        r = client.post("/route", content=body)
    assert r.status_code == 422
    assert needle in r.json()["error"]


def test_bad_batch_inputs(live_server: LiveServer) -> None:
    with live_server.client() as client:
        empty = client.post("/route/batch", json={"requests": []})
        bad_item = client.post("/route/batch", json={"requests": [GOOD, {**GOOD, "prompt_len": 0}]})
        not_list = client.post("/route/batch", json={"requests": GOOD})
    assert empty.status_code == 422 and "requests" in empty.json()["error"]
    assert bad_item.status_code == 422 and "requests.1.prompt_len" in bad_item.json()["error"]
    assert not_list.status_code == 422 and "requests" in not_list.json()["error"]


@pytest.mark.parametrize("path", ["/route", "/route/batch", "/plan"])
def test_oversized_bodies_are_refused(make_server: Any, params_file: Any, path: str) -> None:
    server = make_server(params_path=params_file, watch_params=False, max_body_bytes=4096)
    big = b'{"prompt_len": 1, "system_load": 1, "request_id": "' + b"x" * 8000 + b'"}'

    def chunks() -> Any:
        yield big[:3000]
        yield big[3000:]

    with server.client() as client:
        declared = client.post(path, content=big)
        streamed = client.post(path, content=chunks())  # chunked: no content-length
        after = client.post("/route", json=GOOD)
    for r in (declared, streamed):
        assert r.status_code == 413
        assert "larger than the limit of 4096 bytes" in r.json()["error"]
        assert r.json()["request_id"] == r.headers["x-request-id"]
    assert after.status_code == 200


def test_wrong_method_and_path(live_server: LiveServer) -> None:
    with live_server.client() as client:
        assert client.get("/route").status_code == 405
        missing = client.get("/nope")
    assert missing.status_code == 404
    assert "error" in missing.json()


def test_params_health_ready(live_server: LiveServer) -> None:
    with live_server.client() as client:
        params = client.get("/params").json()
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["params_id"] == MODEL.params.params_id
    assert params["params_id"] == MODEL.params.params_id
    assert params["params"]["alpha"] == TEST_PARAMS["alpha"]
    assert params["params"]["metadata"]["model"] == "test-model"
    assert params["break_even_load"] == pytest.approx(16 * 147456 / 12.9e6 / 0.0869)
    assert params["last_reload_error"] is None


def test_openapi_documents_route_bodies(live_server: LiveServer) -> None:
    spec = httpx.get(f"{live_server.url}/openapi.json").json()
    body = spec["paths"]["/route"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "prompt_len" in body["properties"]
    # system_load is required unless an engine target is named: the body validator says so.
    assert set(body["required"]) == {"prompt_len"}
    assert "decode_target" in body["properties"]["system_load"]["description"]
    for target in ("decode_target", "colloc_target", "prefill_target"):
        assert "pattern" in body["properties"][target]["anyOf"][0]
    answer = spec["paths"]["/route"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    sources = answer["properties"]["input_sources"]["anyOf"][0]["additionalProperties"]
    assert sources["properties"]["source"]["enum"] == ["caller", "scrape", "assumed"]


def test_encoding_is_derived_from_the_breakdown_and_valid_against_the_schema() -> None:
    for L, load in [(1, 0), (1000, 8), (123457, 999)]:
        b = MODEL.explain(L, 200, load)
        answer = json.loads(encoder_for(type(b)).encode(b, "design", "abc", "r1"))
        assert list(answer["breakdown"]) == list(term_names(type(b)))
        assert answer["breakdown"] == {n: getattr(b, n) for n in term_names(type(b))}
        assert RouteResponse.model_validate(answer).decision == b.decision
