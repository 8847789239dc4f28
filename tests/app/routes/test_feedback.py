"""``/feedback`` over real HTTP: calibration off changes nothing, on it learns, hostile feedback
never moves a correction outside its bounds nor answers a 5xx."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.http.route_codec import encoder_for
from pdroute_core.calibration import TERMS
from pdroute_core.params import parse_params
from pdroute_core.routing.objective import DEFAULT_OBJECTIVE
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import RouteInputs
from tests.app.conftest import LiveServer
from tests.factories import TEST_QUEUE_AWARE, write_params

ROUTE: dict[str, int] = {
    "prompt_len": 2000,
    "predicted_output_len": 100,
    "system_load": 8,
    "decode_batch_size": 8,
    "chunk_size": 512,
    "prefill_queue_requests": 0,
}
JSON_TYPE = {"content-type": "application/json"}
ON = {"calibration_enabled": True, "calibration_min_observations": 5, "calibration_refresh_every": 1}


def _server(make_server: Any, params: Path, **settings: Any) -> LiveServer:
    server: LiveServer = make_server(params_path=params, watch_params=False, **settings)
    return server


def _corrections(server: LiveServer) -> dict[str, float]:
    with server.client() as client:
        cal: dict[str, Any] = client.get("/params").json()["calibration"]
    corrections: dict[str, float] = cal["corrections"]
    return corrections


def test_off_by_default_route_answers_are_byte_identical(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(make_server, queue_aware_params_file)
    # The service decides for its objective (PDROUTE_OBJECTIVE, default goodput).
    model = QueueAwareModel(parse_params(queue_aware_params_file.read_text()), objective=DEFAULT_OBJECTIVE)
    with server.client() as client:
        for load in (0, 8, 200):
            inputs = {**ROUTE, "system_load": load}
            r = client.post("/route", json={**inputs, "request_id": f"r{load}"})
            b = model.decide(RouteInputs(**inputs))
            assert r.content == encoder_for(type(b)).encode(b, model.name, model.params.params_id, f"r{load}")
        r = client.post("/feedback", json={"request_id": "r8", "ttft_ms": 10.0})
        assert r.status_code == 409 and "PDROUTE_CALIBRATION_ENABLED" in r.json()["error"]
        cal = client.get("/params").json()["calibration"]
    assert cal["enabled"] is False and set(cal["corrections"].values()) == {1.0}


def test_learns_from_feedback_and_shows_raw_and_calibrated_terms(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(make_server, queue_aware_params_file, **ON)
    with server.client() as client:
        first = client.post("/route", json={**ROUTE, "request_id": "a0"}).json()
        raw_tpot = first["calibration"]["raw"]["tpot_disaggregated_ms"]
        assert first["calibration"]["corrections"]["decode"] == 1.0
        for i in range(30):
            rid = f"a{i}"
            if i:
                client.post("/route", json={**ROUTE, "request_id": rid})
            r = client.post("/feedback", json={"request_id": rid, "tpot_ms": 1.5 * raw_tpot})
            assert r.status_code == 202 and r.json()["accepted"] == 1
        after = client.post("/route", json={**ROUTE, "request_id": "b"}).json()
        # The path's TPOT is dominated by the decode step: learnt to about 1.5.
        assert after["calibration"]["corrections"]["decode"] == pytest.approx(1.5, rel=0.05)
        assert after["calibration"]["raw"]["tpot_disaggregated_ms"] == raw_tpot
        assert after["breakdown"]["tpot_disaggregated_ms"] > 1.3 * raw_tpot
        # Feedback by the decision's inputs works on any replica (no id needed).
        by_inputs = {"inputs": ROUTE, "path": "collocated", "ttft_ms": 50, "e2e_ms": 900}
        assert client.post("/feedback", json=by_inputs).json()["accepted"] == 1
        cal = client.get("/params").json()["calibration"]
    assert cal["feedback"]["accepted"] == 31
    assert cal["accepted_values"]["decode"] >= 30
    assert cal["ttft_error_pct"]["num"] == 1 and cal["e2e_error_pct"]["num"] == 1


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"request_id": "x", "ttft_ms": -1.0}, "ttft_ms"),
        ({"request_id": "x", "tpot_ms": 1e300}, "tpot_ms"),
        ({"request_id": "x", "e2e_ms": "NaN"}, "e2e_ms"),
        ({"request_id": "x", "ttft_ms": "Infinity"}, "ttft_ms"),
        ({"request_id": "x"}, "ttft_ms"),
        ({"ttft_ms": 5.0}, "request_id"),
        ({"request_id": "x", "inputs": ROUTE, "ttft_ms": 5.0}, "request_id"),
        ({"inputs": ROUTE, "ttft_ms": 5.0}, "path"),
        ({"inputs": {**ROUTE, "prompt_len": -3}, "path": "collocated", "ttft_ms": 5.0}, "inputs.prompt_len"),
        ({"request_id": "x", "ttft_ms": 5.0, "colour": "red"}, "colour"),
        ({"request_id": "x", "ttft_ms": 5.0, "output_tokens": 0}, "output_tokens"),
        ({"request_id": "x" * 300, "ttft_ms": 5.0}, "request_id"),
        ({"request_id": "x", "ttft_ms": 5.0, "path": "sideways"}, "path"),
    ],
)
def test_bad_feedback_is_a_422_naming_the_field(
    make_server: Any, queue_aware_params_file: Path, item: dict[str, Any], field: str
) -> None:
    server = _server(make_server, queue_aware_params_file, **ON)
    with server.client() as client:
        for path, body in (("/feedback", item), ("/feedback/batch", {"items": [item]})):
            r = client.post(
                path, content=json.dumps(item if path == "/feedback" else body), headers=JSON_TYPE
            )
            assert r.status_code == 422, r.text
            assert field in r.json()["error"]


def test_hostile_feedback_never_leaves_the_bounds_nor_fails(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(
        make_server, queue_aware_params_file, **ON, max_feedback_items=2000, max_body_bytes=1_000_000
    )
    with server.client() as client:
        for i in range(20):
            client.post("/route", json={**ROUTE, "system_load": i, "request_id": f"h{i}"})
        statuses = []
        # Out of order and repeated ids, unknown ids, the extremes the schema allows.
        for value in (86_400_000.0, 0.0, 1e-9, 86_400_000.0, 0.0):
            items = [
                {"request_id": f"h{i % 25}", "ttft_ms": value, "tpot_ms": value, "e2e_ms": value}
                for i in range(40)
            ]
            r = client.post("/feedback/batch", json={"items": items})
            statuses.append(r.status_code)
            assert set(r.json()["unknown_ids"]) <= {f"h{i}" for i in range(25)}
        # A flood by inputs (any replica's form), each wildly off.
        flood = [
            {"inputs": {**ROUTE, "system_load": i % 50}, "path": "disaggregated", "ttft_ms": 86_400_000.0}
            for i in range(2000)
        ]
        statuses.append(client.post("/feedback/batch", json={"items": flood}).status_code)
        # Then 5x the prediction (inside the gate): the correction goes to its bound and stops.
        raw_ttft = client.post("/route", json=ROUTE).json()["calibration"]["raw"]["ttft_disaggregated_ms"]
        five = [{**f, "ttft_ms": 5 * raw_ttft} for f in flood[:100]]
        statuses.append(client.post("/feedback/batch", json={"items": five}).status_code)
        statuses.append(client.post("/feedback/batch", json={"items": flood + flood[:1]}).status_code)  # over
        statuses.append(
            client.post("/feedback/batch", content=b"x" * 1_100_000, headers=JSON_TYPE).status_code
        )  # too big
        statuses.append(client.post("/feedback", json={"request_id": "never-seen", "ttft_ms": 1}).status_code)
        statuses.append(
            client.post(
                "/feedback", content=b'{"request_id": "x", "ttft_ms": 1e999}', headers=JSON_TYPE
            ).status_code
        )
        statuses.append(client.post("/feedback", content=b"not json", headers=JSON_TYPE).status_code)
        cal = client.get("/params").json()["calibration"]
        route = client.post("/route", json=ROUTE)
        metrics = client.get("/metrics").text
    assert statuses[:7] == [202] * 7
    assert statuses[7:] == [422, 413, 202, 422, 422]
    assert all(s < 500 for s in statuses)
    assert route.status_code == 200
    for term in TERMS:
        assert 0.5 <= cal["corrections"][term] <= 2.0
    assert cal["corrections"]["prefill"] == 2.0  # pushed to the bound, not past it
    assert cal["feedback"]["unknown_id"] >= 1
    assert cal["rejected_values"] >= 2000  # the wild values fail the innovation gate
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    values = {s.labels["term"]: s.value for s in families["pdroute_calibration_correction"].samples}
    assert values == cal["corrections"]
    outcomes = {
        s.labels["outcome"]: s.value
        for s in families["pdroute_calibration_feedback"].samples
        if s.name.endswith("_total")
    }
    assert outcomes["unknown_id"] == cal["feedback"]["unknown_id"]
    errors = {
        (s.labels["latency"], s.labels["quantile"]): s.value
        for s in families["pdroute_calibration_prediction_error_ratio"].samples
    }
    assert errors[("ttft", "0.5")] > 0.5 and not math.isnan(errors[("ttft", "0.9")])


def test_token_required_when_set(make_server: Any, queue_aware_params_file: Path) -> None:
    server = _server(make_server, queue_aware_params_file, **ON, admin_token="s3cret")
    item = {"request_id": "z", "ttft_ms": 5.0}
    with server.client() as client:
        assert client.post("/feedback", json=item).status_code == 401
        assert (
            client.post("/feedback", json=item, headers={"Authorization": "Bearer nope"}).status_code == 401
        )
        r = client.post("/feedback", json=item, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 202 and r.json()["unknown_ids"] == ["z"]


def test_corrections_kept_on_a_same_params_reload_reset_on_new_params(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(make_server, queue_aware_params_file, **ON)
    with server.client() as client:
        tpot = client.post("/route", json=ROUTE).json()["calibration"]["raw"]["tpot_disaggregated_ms"]
        items = [{"inputs": ROUTE, "path": "disaggregated", "tpot_ms": 1.4 * tpot} for _ in range(10)]
        client.post("/feedback/batch", json={"items": items})
        assert _corrections(server)["decode"] == pytest.approx(1.4, rel=0.02)
        server.app.state.store.reload()  # the same file: the same params_id
        client.post("/route", json=ROUTE)
        assert _corrections(server)["decode"] == pytest.approx(1.4, rel=0.02)
        write_params(
            queue_aware_params_file, schema_version=2, queue_aware={**TEST_QUEUE_AWARE, "decode_base_ms": 7.0}
        )
        server.app.state.store.reload()
        assert client.post("/route", json=ROUTE).json()["calibration"]["corrections"]["decode"] == 1.0
    assert _corrections(server)["decode"] == 1.0


def test_design_model_is_not_calibrated(make_server: Any, params_file: Path) -> None:
    server = _server(make_server, params_file, **ON)
    with server.client() as client:
        body = client.post("/route", json={**ROUTE, "request_id": "d"}).json()
        r = client.post("/feedback", json={"request_id": "d", "ttft_ms": 3.0})
    assert "calibration" not in body
    assert r.status_code == 202 and r.json()["not_calibrated"] == 1


def test_reload_onto_the_design_model_and_back(make_server: Any, queue_aware_params_file: Path) -> None:
    server = _server(make_server, queue_aware_params_file, **ON)
    v2 = queue_aware_params_file.read_text()
    with server.client() as client:
        tpot = client.post("/route", json=ROUTE).json()["calibration"]["raw"]["tpot_disaggregated_ms"]
        items = [{"inputs": ROUTE, "path": "disaggregated", "tpot_ms": 1.2 * tpot} for _ in range(10)]
        client.post("/feedback/batch", json={"items": items})
        write_params(queue_aware_params_file)  # schema 1: the design model serves
        server.app.state.store.reload()
        design = client.post("/route", json={**ROUTE, "request_id": "d1"})
        fb = client.post("/feedback", json={"request_id": "d1", "ttft_ms": 4.0})
        batch = client.post("/route/batch", json={"requests": [{**ROUTE, "request_id": "d2"}]})
        queue_aware_params_file.write_text(v2)  # the same queue-aware params again: corrections kept
        server.app.state.store.reload()
        back = client.post("/route", json=ROUTE).json()
    assert design.status_code == 200 and "calibration" not in design.json()
    assert fb.status_code == 202 and fb.json()["not_calibrated"] == 1
    assert batch.status_code == 200
    assert back["calibration"]["corrections"]["decode"] == pytest.approx(1.2, rel=0.02)
