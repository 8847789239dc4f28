"""``/route`` under an objective: the service's setting, a request's override, bad values, batches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.settings import Settings
from pdroute_client.served import ServedParams
from pdroute_core.errors import InvalidParams
from pdroute_core.routing import QueueAwareModel, RouteInputs
from solver.params import load_params
from tests.app.conftest import LiveServer

# No path serves it within 200 ms, and the pool's 40 queued prompts are past that target already.
HOPELESS: dict[str, Any] = {
    "prompt_len": 8192,
    "predicted_output_len": 200,
    "system_load": 64,
    "decode_batch_size": 64,
    "chunk_size": 512,
    "prefill_queue_requests": 40,
    "prefill_pool_gpus": 2,
    "ttft_slo_ms": 200.0,
    "tpot_slo_ms": 50.0,
}


@pytest.fixture
def models(queue_aware_params_file: Path) -> dict[str, QueueAwareModel]:
    model = QueueAwareModel(load_params(queue_aware_params_file))
    return {"latency": model, "goodput": model.with_objective("goodput")}


def test_the_service_decides_for_its_objective_and_a_request_may_override_it(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path, models: dict[str, QueueAwareModel]
) -> None:
    expected = {name: m.decide(RouteInputs(**HOPELESS)) for name, m in models.items()}
    assert expected["latency"].decision != expected["goodput"].decision  # the case tells them apart
    server = make_server(params_path=queue_aware_params_file, watch_params=False)
    with server.client() as http:
        assert http.get("/params").json()["objective"] == "goodput"  # the documented default
        default = http.post("/route", json=HOPELESS).json()
        override = http.post("/route", json={**HOPELESS, "objective": "latency"}).json()
        batch = http.post(
            "/route/batch",
            json={
                "requests": [
                    HOPELESS,
                    {**HOPELESS, "objective": "latency"},
                    {**HOPELESS, "objective": "goodput"},
                ]
            },
        ).json()["results"]
    for answer, name in ((default, "goodput"), (override, "latency")):
        b = expected[name]
        assert (answer["decision"], answer["objective"], answer["admission"]) == (
            b.decision,
            name,
            b.admission,
        )
        assert answer["predicted_lateness_ms"] == b.predicted_lateness_ms
        assert answer["meets_slo"] is False and answer["admission"] == "shed"
    assert [r["decision"] for r in batch] == [default["decision"], override["decision"], default["decision"]]
    assert [r["objective"] for r in batch] == ["goodput", "latency", "goodput"]


def test_the_latency_setting_serves_the_model_as_before(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path, models: dict[str, QueueAwareModel]
) -> None:
    server = make_server(params_path=queue_aware_params_file, watch_params=False, objective="latency")
    with server.client() as http:
        assert http.get("/params").json()["objective"] == "latency"
        answer = http.post("/route", json=HOPELESS).json()
    assert answer["decision"] == models["latency"].decide(RouteInputs(**HOPELESS)).decision


@pytest.mark.parametrize("bad", ["fast", "", 1, None, True])
def test_a_bad_objective_is_a_422_naming_the_field(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path, bad: Any
) -> None:
    server = make_server(params_path=queue_aware_params_file, watch_params=False)
    with server.client() as http:
        body = {**HOPELESS, "objective": bad}
        response = http.post("/route", json=body)
        if bad is None:  # null: the service's setting
            assert response.status_code == 200
            return
        assert response.status_code == 422
        assert "objective" in response.json()["error"]
        batch = http.post("/route/batch", json={"requests": [HOPELESS, body]})
        assert batch.status_code == 422 and "objective" in batch.json()["error"]


def test_a_bad_objective_setting_is_refused() -> None:
    with pytest.raises(ValidationError, match="objective"):
        Settings(objective="fast")  # type: ignore[arg-type]


# A prompt beside 4 decodes and 3,000 pending tokens on an idle pool: both paths in time.
BESIDE: dict[str, Any] = {
    "prompt_len": 2000,
    "predicted_output_len": 50,
    "system_load": 4,
    "decode_batch_size": 4,
    "chunk_size": 512,
    "pending_prefill_tokens": 3000,
    "decode_pending_prefill_tokens": 3000,
    "prefill_pool_gpus": 1,
}


@pytest.mark.parametrize("first_token", ["decode-engine", "prefill-engine"])
def test_the_first_token_setting_is_served_and_shown_to_local_clients(
    make_server: Callable[..., LiveServer], queue_aware_params_file: Path, first_token: str
) -> None:
    model = QueueAwareModel(
        load_params(queue_aware_params_file), objective="goodput", first_token=first_token
    )
    expected = model.decide(RouteInputs(**BESIDE))
    settings: dict[str, Any] = {} if first_token == "decode-engine" else {"first_token": first_token}
    server = make_server(params_path=queue_aware_params_file, watch_params=False, **settings)
    with server.client() as http:
        params = http.get("/params").json()
        answer = http.post("/route", json=BESIDE).json()
    assert params["first_token"] == first_token  # decode-engine: the documented default
    assert answer["breakdown"]["ttft_disaggregated_ms"] == expected.ttft_disaggregated_ms
    assert answer["breakdown"]["tpot_disaggregated_ms"] == expected.tpot_disaggregated_ms
    local = ServedParams.from_body(params).model
    assert isinstance(local, QueueAwareModel) and local.first_token == first_token


def test_a_bad_first_token_is_refused_by_the_settings_and_the_local_client(
    queue_aware_params_file: Path,
) -> None:
    with pytest.raises(ValidationError, match="first_token"):
        Settings(first_token="gateway")  # type: ignore[arg-type]
    with pytest.raises(InvalidParams, match="first_token: expected one of decode-engine, prefill-engine"):
        ServedParams.from_body({**_served_body(queue_aware_params_file), "first_token": "gateway"})


def _served_body(path: Path) -> dict[str, Any]:
    params = load_params(path)
    return {
        "params": params.to_dict(),
        "params_id": params.params_id,
        "model": "queue-aware",
        "default_output_len": 200,
        "harm_weight": 0.0,
        "slo_margin": 0.1,
    }
