"""``/route`` with the decision models: selection, the optional inputs, default SLOs, the 500 path.

Real uvicorn on loopback, spoken to with httpx; every expected answer is the model's own
``decide`` on the same inputs, so the HTTP edge is checked, not the maths (tests/pdroute_core/routing).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import app.params_store
from app.http.route_codec import breakdown_terms
from pdroute_core.errors import InvalidParams
from pdroute_core.routing import OPTIONAL_INPUTS, QueueAwareModel, RouteInputs, build_model
from pdroute_core.routing.queue_aware import DEFAULT_HARM_WEIGHT
from pdroute_core.routing.types import OPTIONAL_RATE_INPUTS, UNLISTED_INPUTS
from solver.params import load_params
from tests.app.conftest import LiveServer
from tests.factories import write_params

FULL_STATE: dict[str, Any] = {
    "prefill_queue_requests": 3,
    "prefill_queue_tokens": 9000,
    "prefill_running_requests": 2,
    "prefill_running_tokens": 7000,
    "prefill_pool_gpus": 2,
    "pending_prefill_tokens": 512,
    "colloc_context_tokens": 40_000,
    "decode_context_tokens": 12_000,
    "cached_prompt_tokens": 100,
    "ttft_slo_ms": 800.0,
    "tpot_slo_ms": 40,  # an integer is a number of ms too
}


def _expected(model: QueueAwareModel, body: dict[str, Any], output_len: int = 200) -> Any:
    fields = {k: v for k, v in body.items() if k != "request_id"}
    fields.setdefault("predicted_output_len", output_len)
    return model.decide(RouteInputs(**fields))


@pytest.fixture
def qa_server(make_server: Callable[..., LiveServer], queue_aware_params_file: Path) -> LiveServer:
    return make_server(params_path=queue_aware_params_file, watch_params=False)


@pytest.fixture
def qa_model(queue_aware_params_file: Path) -> QueueAwareModel:
    return QueueAwareModel(load_params(queue_aware_params_file), harm_weight=DEFAULT_HARM_WEIGHT)


@pytest.mark.parametrize(
    "state",
    [{}, FULL_STATE, {"prefill_queue_requests": 10, "system_load": 60}, {"ttft_slo_ms": 1.0}],
    ids=["design-fields-only", "full-state", "queued", "unmeetable-slo"],
)
def test_auto_serves_the_queue_aware_model_with_every_term(
    qa_server: LiveServer, qa_model: QueueAwareModel, state: dict[str, Any]
) -> None:
    body = {"prompt_len": 2048, "system_load": 16, "decode_batch_size": 8, "request_id": "q1", **state}
    with qa_server.client() as client:
        r = client.post("/route", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    b = _expected(qa_model, body)
    assert answer["model"] == "queue-aware"
    assert (answer["decision"], answer["reason"]) == (b.decision, b.reason)
    assert answer["t_collocated_ms"] == b.t_collocated_ms
    assert answer["t_disaggregated_ms"] == b.t_disaggregated_ms
    assert answer["assumed"] == list(b.assumed) == [n for n in OPTIONAL_INPUTS if n not in body]
    assert answer["meets_slo"] is b.meets_slo
    assert list(answer["breakdown"]) == list(breakdown_terms(type(b)))
    assert answer["breakdown"] == {n: getattr(b, n) for n in breakdown_terms(type(b))}
    assert answer["request_id"] == "q1"


def test_batch_with_the_new_inputs_equals_single_routes(qa_server: LiveServer) -> None:
    reqs = [
        {"prompt_len": 100, "system_load": 0},
        {"prompt_len": 3000, "system_load": 30, **FULL_STATE},
        {"prompt_len": 8000, "system_load": 5, "prefill_queue_requests": 20, "ttft_slo_ms": 50.5},
    ]
    with qa_server.client() as client:
        batch = client.post("/route/batch", json={"requests": reqs}).json()
        singles = [client.post("/route", json=r).json() for r in reqs]
    assert batch["results"] == singles


def test_the_model_setting_chooses_and_every_answer_names_it(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path
) -> None:
    server = make_server(params_path=queue_aware_params_file, watch_params=False, decision_model="design")
    with server.client() as client:
        answer = client.post("/route", json={"prompt_len": 1024, "system_load": 8, **FULL_STATE}).json()
        params = client.get("/params").json()
        metrics = client.get("/metrics").text
    design = build_model("design", load_params(queue_aware_params_file))
    b = design.decide(RouteInputs(1024, 200, 8, **FULL_STATE))
    assert answer["model"] == params["model"] == "design"
    assert answer["assumed"] == [] and "meets_slo" not in answer
    assert answer["breakdown"] == {n: getattr(b, n) for n in breakdown_terms(type(b))}
    assert 'decision_model="design"' in metrics
    assert f'pdroute_route_decisions_total{{decision="{b.decision}",reason="{b.reason}"}} 1.0' in metrics


def test_harm_weight_setting_reaches_the_model(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path
) -> None:
    server = make_server(params_path=queue_aware_params_file, watch_params=False, harm_weight=2.5)
    with server.client() as client:
        answer = client.post("/route", json={"prompt_len": 1024, "system_load": 8}).json()
    assert answer["breakdown"]["harm_weight"] == 2.5


def test_params_without_the_chosen_models_forms_are_refused_at_start_and_on_reload(
    make_server: Callable[..., LiveServer], tmp_path: Path, queue_aware_params_file: Path
) -> None:
    v1 = write_params(tmp_path / "v1.json")
    with pytest.raises(InvalidParams, match=r"v1\.json: model queue-aware: these params have no queue_aware"):
        make_server(params_path=v1, watch_params=False, decision_model="queue-aware")
    path = tmp_path / "params.json"
    path.write_bytes(queue_aware_params_file.read_bytes())
    server = make_server(params_path=path, watch_params=False, decision_model="queue-aware", admin_token="t")
    path.write_bytes(v1.read_bytes())
    with server.client() as client:
        refused = client.post("/admin/reload", headers={"Authorization": "Bearer t"})
        params = client.get("/params").json()
        answer = client.post("/route", json={"prompt_len": 10, "system_load": 1}).json()
    assert refused.status_code == 422 and "no queue_aware forms" in refused.json()["error"]
    assert params["model"] == answer["model"] == "queue-aware"
    assert "no queue_aware forms" in params["last_reload_error"]


def test_service_default_slos_apply_when_a_request_gives_none(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path, qa_model: QueueAwareModel
) -> None:
    server = make_server(
        params_path=queue_aware_params_file,
        watch_params=False,
        default_ttft_slo_ms=1.0,
        default_tpot_slo_ms=5.0,
    )
    plain = {"prompt_len": 4096, "system_load": 32}
    own = {**plain, "ttft_slo_ms": 100_000.0, "tpot_slo_ms": 1000.0}
    with server.client() as client:
        defaulted = client.post("/route", json=plain).json()
        given = client.post("/route", json=own).json()
    b_default = _expected(qa_model, {**plain, "ttft_slo_ms": 1.0, "tpot_slo_ms": 5.0})
    b_own = _expected(qa_model, own)
    assert defaulted["meets_slo"] is b_default.meets_slo is False  # 1 ms to first token: never
    assert defaulted["reason"] == b_default.reason
    assert given["meets_slo"] is b_own.meets_slo is True
    assert "ttft_slo_ms" not in defaulted["assumed"]


GOOD = {"prompt_len": 1000, "system_load": 4}
BAD_NEW_INPUTS: list[tuple[str, Any, str]] = [
    *[(name, -1, name) for name in OPTIONAL_INPUTS],
    *[(name, 1.5, name) for name in OPTIONAL_INPUTS if not name.endswith("_slo_ms")],
    *[(name, "3", name) for name in OPTIONAL_INPUTS],
    *[(name, True, name) for name in OPTIONAL_INPUTS],
    *[(name, 2**70, name) for name in OPTIONAL_INPUTS],
    ("prefill_pool_gpus", 0, "prefill_pool_gpus"),
    ("ttft_slo_ms", 0, "ttft_slo_ms"),
    ("tpot_slo_ms", 0.0, "tpot_slo_ms"),
    *[(name, v, name) for name in OPTIONAL_RATE_INPUTS for v in (-1, -0.5, "3", True, 1e10)],
    *[("prefill_running_tokens", v, "prefill_running_tokens") for v in (-1, 1.5, "3", True, 2**70)],
    *[
        (name, v, name)
        for name in UNLISTED_INPUTS
        if name not in OPTIONAL_RATE_INPUTS and name != "prefill_running_tokens"
        for v in (-1, "3", True, 2**70)
    ],
    *[(name, 1.5, name) for name in ("colloc_feasible_routes", "decode_feasible_routes")],
    ("cached_prompt_tokens", 1001, "cached_prompt_tokens: Value error, must be <= prompt_len (1000)"),
    (
        "colloc_cached_prompt_tokens",
        1001,
        "colloc_cached_prompt_tokens: Value error, must be <= prompt_len (1000)",
    ),
    (
        "prefill_cached_prompt_tokens",
        1001,
        "prefill_cached_prompt_tokens: Value error, must be <= prompt_len (1000)",
    ),
]


@pytest.mark.parametrize(
    ("name", "value", "needle"), BAD_NEW_INPUTS, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD_NEW_INPUTS]
)
def test_bad_new_inputs_are_a_422_naming_the_field(
    qa_server: LiveServer, name: str, value: Any, needle: str
) -> None:
    with qa_server.client() as client:
        r = client.post("/route", json={**GOOD, name: value})
        batch = client.post("/route/batch", json={"requests": [GOOD, {**GOOD, name: value}]})
    assert r.status_code == 422, r.text
    assert needle in r.json()["error"]
    assert batch.status_code == 422 and f"requests.1.{name}" in batch.json()["error"]


@pytest.mark.parametrize("text", ["1e400", "-1e400", "NaN", "Infinity"])
def test_non_finite_slos_are_refused(qa_server: LiveServer, text: str) -> None:
    raw = '{"prompt_len": 10, "system_load": 1, "ttft_slo_ms": ' + text + "}"
    with qa_server.client() as client:
        r = client.post("/route", content=raw)
    assert r.status_code == 422 and ("ttft_slo_ms" in r.json()["error"] or "JSON" in r.json()["error"])


def test_openapi_documents_the_new_inputs_and_both_breakdowns(qa_server: LiveServer) -> None:
    spec = httpx.get(f"{qa_server.url}/openapi.json").json()
    route = spec["paths"]["/route"]["post"]
    props = route["requestBody"]["content"]["application/json"]["schema"]["properties"]
    for name in (*OPTIONAL_INPUTS, *UNLISTED_INPUTS):
        assert props[name]["description"], name
    assert props["prefill_pool_gpus"]["anyOf"][0]["minimum"] == 1
    answer = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert {"model", "reason", "assumed", "meets_slo", "breakdown"} <= set(answer["properties"])
    kinds = answer["properties"]["breakdown"]["anyOf"]
    assert {tuple(k["properties"]) for k in kinds} == {
        breakdown_terms(type(b)) for b in (_design_breakdown(), _qa_breakdown())
    }
    assert "/route/batch" in spec["paths"]


def _design_breakdown() -> Any:
    from pdroute_core.routing.design import RouteBreakdown

    return RouteBreakdown("collocated", "kv_transfer", 0.0, 0.0, (), 0.0, 0.0, 0.0, 0.0, 0.0)


def _qa_breakdown() -> Any:
    from pdroute_core.routing import QueueAwareBreakdown

    names = breakdown_terms(QueueAwareBreakdown)
    values: list[Any] = [0.0] * len(names)  # the terms under "breakdown", then the top-level ones
    values += ["latency", 0.0, "admit"]  # objective, predicted_lateness_ms, admission
    return QueueAwareBreakdown("collocated", "x", 0.0, 0.0, (), True, *values)


class _FailingModel:
    name = "failing"
    reasons = ("x",)

    def decide(self, inputs: RouteInputs) -> Any:
        raise RuntimeError("injected failure")

    def decide_many(self, columns: Any) -> Any:
        raise RuntimeError("injected failure")


def test_an_unexpected_exception_answers_a_json_500_logged_with_its_request_id(
    make_server: Callable[..., LiveServer],
    params_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(app.params_store, "build_model", lambda *a, **k: _FailingModel())
    server = make_server(params_path=params_file, watch_params=False)
    with caplog.at_level(logging.ERROR, logger="pdroute.errors"), server.client() as client:
        by_body = client.post("/route", json={"prompt_len": 10, "system_load": 1, "request_id": "gw-7"})
        by_header = client.post(
            "/route/batch",
            json={"requests": [{"prompt_len": 10, "system_load": 1}]},
            headers={"x-request-id": "hdr-9"},
        )
        made_up = client.post("/route", json={"prompt_len": 10, "system_load": 1})
        healthy = client.get("/healthz")
        metrics = client.get("/metrics").text
    for r, request_id in ((by_body, "gw-7"), (by_header, "hdr-9"), (made_up, None)):
        assert r.status_code == 500
        assert r.headers["content-type"] == "application/json"
        problem = r.json()
        assert "internal error" in problem["error"] and "injected" not in problem["error"]
        if request_id is not None:
            assert problem["request_id"] == request_id
        logged = [rec for rec in caplog.records if problem["request_id"] in rec.getMessage()]
        assert len(logged) == 1 and logged[0].exc_info is not None
        assert str(logged[0].exc_info[1]) == "injected failure"  # logged with its traceback
    assert healthy.status_code == 200
    assert 'pdroute_http_requests_total{code="500",handler="/route"} 2.0' in metrics


def test_error_bodies_carry_the_request_id_sent(live_server: LiveServer) -> None:
    with live_server.client() as client:
        bad = client.post("/route", json={"prompt_len": 0, "system_load": 1}, headers={"x-request-id": "a-1"})
        missing = client.get("/nope", headers={"x-request-id": "a-2"})
        wrong_method = client.get("/route")
    assert bad.status_code == 422 and bad.json()["request_id"] == "a-1"
    assert missing.status_code == 404 and missing.json()["request_id"] == "a-2"
    assert wrong_method.status_code == 405 and wrong_method.json()["request_id"]
    assert json.loads(wrong_method.text)["request_id"] == wrong_method.headers["x-request-id"]


def test_slo_margin_setting_reaches_the_model(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path
) -> None:
    body = {"prompt_len": 1024, "system_load": 8}
    strict = make_server(params_path=queue_aware_params_file, watch_params=False, slo_margin=0.0)
    with strict.client() as client:
        free = client.post("/route", json=body).json()["breakdown"]
        # A target 1.5x above both paths' predicted TTFT: met without a margin ...
        target = 1.5 * max(free["ttft_collocated_ms"], free["ttft_disaggregated_ms"])
        assert client.post("/route", json={**body, "ttft_slo_ms": target}).json()["meets_slo"] is True
    wide = make_server(params_path=queue_aware_params_file, watch_params=False, slo_margin=0.5)
    with wide.client() as client:
        # ... and not with a margin of one half (met only within half the target).
        assert client.post("/route", json={**body, "ttft_slo_ms": target}).json()["meets_slo"] is False
