"""``PDROUTE_OUTPUT_LEN_LEARNING`` over real HTTP: off changes nothing; ``correct`` learns each
prompt bucket's output lengths from ``/feedback`` and ``/route`` decides on the corrected length."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from app.settings import InvalidSettings, Settings
from pdroute_core.params import parse_params
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import RouteInputs
from tests.app.conftest import LiveServer

LONG: dict[str, int] = {
    "prompt_len": 3000,
    "predicted_output_len": 200,
    "system_load": 8,
    "decode_batch_size": 8,
    "chunk_size": 512,
    "prefill_queue_requests": 0,
}
SHORT = {**LONG, "prompt_len": 500}
# Calibration on (it carries /feedback) but frozen at 1, so answers are the raw model's.
ON = {
    "calibration_enabled": True,
    "calibration_min_observations": 1_000_000,
    "calibration_refresh_every": 1,
    "output_len_learning": "correct",
}
RATIO = "pdroute_output_len_correction_ratio"


def _server(make_server: Any, params: Path, **settings: Any) -> LiveServer:
    server: LiveServer = make_server(params_path=params, watch_params=False, **settings)
    return server


def _ratios(server: LiveServer) -> dict[str, float]:
    with server.client() as client:
        text = client.get("/metrics").text
    return {
        s.labels["min_prompt_len"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == RATIO
        for s in family.samples
    }


def _terms(answer: dict[str, Any]) -> tuple[float, float, str]:
    return answer["t_collocated_ms"], answer["t_disaggregated_ms"], answer["decision"]


def _expected(model: QueueAwareModel, inputs: dict[str, int], output_len: int) -> tuple[float, float, str]:
    b = model.decide(dataclasses.replace(RouteInputs(**inputs), predicted_output_len=output_len))
    return b.t_collocated_ms, b.t_disaggregated_ms, b.decision


def test_off_by_default(make_server: Any, queue_aware_params_file: Path) -> None:
    server = _server(make_server, queue_aware_params_file, calibration_enabled=True)
    assert server.app.state.output_learning is None
    with server.client() as client:
        client.post("/route", json={**LONG, "request_id": "a"})
        r = client.post("/feedback", json={"request_id": "a", "e2e_ms": 900.0, "output_tokens": 20})
        assert r.status_code == 202
        assert client.get("/params").json()["output_len_learning"] == {"mode": "off", "buckets": []}
    assert _ratios(server) == {}


def test_correct_learns_the_bucket_and_route_decides_on_it(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    model = QueueAwareModel(parse_params(queue_aware_params_file.read_text()))
    assert _expected(model, LONG, 50)[:2] != _expected(model, LONG, 200)[:2]
    server = _server(make_server, queue_aware_params_file, **ON)
    with server.client() as client:
        for i in range(49):  # one short of min_observations (50): still the identity
            assert _terms(client.post("/route", json={**LONG, "request_id": f"r{i}"}).json()) == _expected(
                model, LONG, 200
            )
        items = [{"request_id": f"r{i}", "e2e_ms": 900.0, "output_tokens": 50} for i in range(49)]
        assert client.post("/feedback/batch", json={"items": items}).status_code == 202
        assert _terms(client.post("/route", json=LONG).json()) == _expected(model, LONG, 200)
        # The 50th, sent with the decision's inputs instead of its id: the bucket leaves 1.
        item = {"inputs": LONG, "path": "collocated", "e2e_ms": 900.0, "output_tokens": 50}
        assert client.post("/feedback", json=item).status_code == 202
        learning = client.get("/params").json()["output_len_learning"]
        # Told 200, observed 50 in bucket [2048, 4096): every later told length is scaled by 1/4.
        assert _terms(client.post("/route", json=LONG).json()) == _expected(model, LONG, 50)
        assert _terms(client.post("/route", json={**LONG, "predicted_output_len": 400}).json()) == (
            _expected(model, LONG, 100)
        )
        omitted = {k: v for k, v in LONG.items() if k != "predicted_output_len"}  # the default, 200
        assert _terms(client.post("/route", json=omitted).json()) == _expected(model, LONG, 50)
        assert _terms(client.post("/route", json=SHORT).json()) == _expected(model, SHORT, 200)
        batch = client.post("/route/batch", json={"requests": [LONG, SHORT]}).json()["results"]
        assert [_terms(a) for a in batch] == [_expected(model, LONG, 50), _expected(model, SHORT, 200)]
        unknown = {"request_id": "never", "e2e_ms": 1.0, "output_tokens": 5}
        assert client.post("/feedback", json=unknown).status_code == 202
        after = client.get("/params").json()["output_len_learning"]
    assert learning["mode"] == "correct" and learning["observations"] == 50
    assert learning["buckets"] == [
        {
            "min_prompt_len": 2048,
            "observations": 50,
            "mean_output_tokens": 50.0,
            "ratio": 0.25,
            "observed_tokens": 50 * 50,  # the sums in force, for a client's exact local correction
            "told_tokens": 50 * 200,
        }
    ]
    assert after["unmatched"] == 1 and after["observations"] == 50
    assert _ratios(server) == {"2048": 0.25}


def test_route_remembers_the_told_length_not_the_corrected_one(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(make_server, queue_aware_params_file, **ON)
    with server.client() as client:
        for round_ in range(2):  # the second round is decided on 1/4 but learns from the told 200
            ids = [f"{round_}-{i}" for i in range(50)]
            reqs = [{**LONG, "request_id": rid} for rid in ids]
            assert client.post("/route/batch", json={"requests": reqs}).status_code == 200
            items = [{"request_id": rid, "e2e_ms": 900.0, "output_tokens": 50} for rid in ids]
            assert client.post("/feedback/batch", json={"items": items}).status_code == 202
        learning = client.get("/params").json()["output_len_learning"]
    assert learning["buckets"][0]["ratio"] == 0.25 and learning["buckets"][0]["observations"] == 100


def test_a_snapshot_is_swapped_on_the_refresh_schedule(
    make_server: Any, queue_aware_params_file: Path
) -> None:
    server = _server(make_server, queue_aware_params_file, **{**ON, "calibration_refresh_every": 60})
    with server.client() as client:
        items = [{"inputs": LONG, "path": "collocated", "e2e_ms": 900.0, "output_tokens": 50}] * 59
        client.post("/feedback/batch", json={"items": items})
        assert client.get("/params").json()["output_len_learning"]["buckets"] == []
        client.post("/feedback", json=items[0])
        buckets = client.get("/params").json()["output_len_learning"]["buckets"]
    assert [b["ratio"] for b in buckets] == [0.25]


def test_correct_needs_calibration() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(output_len_learning="correct")
    assert str(InvalidSettings.of(info.value)) == (
        "PDROUTE_OUTPUT_LEN_LEARNING: correct learns from POST /feedback, which needs"
        " PDROUTE_CALIBRATION_ENABLED=true"
    )
    with pytest.raises(ValidationError) as info:
        bad: dict[str, Any] = {"calibration_enabled": True, "output_len_learning": "on"}
        Settings(**bad)
    assert str(InvalidSettings.of(info.value)).startswith("PDROUTE_OUTPUT_LEN_LEARNING: ")


def test_the_window_minimum_and_clip_are_settings(make_server: Any, queue_aware_params_file: Path) -> None:
    settings = {**ON, "output_len_window": 4, "output_len_min_observations": 3, "output_len_max_ratio": 2.0}
    server = _server(make_server, queue_aware_params_file, **settings)
    item = {"inputs": LONG, "path": "collocated", "e2e_ms": 900.0, "output_tokens": 50}
    with server.client() as client:
        client.post("/feedback/batch", json={"items": [item] * 2})
        below = client.get("/params").json()["output_len_learning"]["buckets"]
        client.post("/feedback", json=item)
        first = client.get("/params").json()["output_len_learning"]
        # Told 200, observed 50: 0.25, clipped to 1/2. The window keeps the last 4 of 6.
        client.post("/feedback/batch", json={"items": [{**item, "output_tokens": 400}] * 3})
        last = client.get("/params").json()["output_len_learning"]
    # 2 < 3: still the identity, no sums in force.
    assert [(b["observations"], b["ratio"], b["observed_tokens"], b["told_tokens"]) for b in below] == [
        (2, 1.0, None, None)
    ]
    assert (first["window"], first["min_observations"], first["max_ratio"]) == (4, 3, 2.0)
    assert first["buckets"] == [
        {
            "min_prompt_len": 2048,
            "observations": 3,
            "mean_output_tokens": 50.0,
            "ratio": 0.5,
            "observed_tokens": 150,
            "told_tokens": 600,
        }
    ]
    # Window: 50 + 3 x 400 observed over 4 x 200 told = 1.5625 (within the clip).
    assert last["buckets"][0]["observations"] == 4 and last["buckets"][0]["ratio"] == 1.5625
    assert (last["buckets"][0]["observed_tokens"], last["buckets"][0]["told_tokens"]) == (1250, 800)


def test_the_minimum_must_fit_in_the_window() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({**ON, "output_len_window": 10, "output_len_min_observations": 11})
    assert str(InvalidSettings.of(info.value)) == (
        "PDROUTE_OUTPUT_LEN_MIN_OBSERVATIONS: expected at most PDROUTE_OUTPUT_LEN_WINDOW (10), got 11"
    )
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({**ON, "output_len_max_ratio": 1.0})
    assert str(InvalidSettings.of(info.value)).startswith("PDROUTE_OUTPUT_LEN_MAX_RATIO: ")
