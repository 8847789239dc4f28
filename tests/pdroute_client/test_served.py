"""``ServedParams`` reads the table of default output lengths and the output-length learning's
snapshot from ``/params`` strictly; a body without them (an older service) means neither; the
local tier applies both as ``/route`` does (checked here against a running service too)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.learners.output_length import OFF_SUMMARY, OutputLearningState
from app.routes.route import corrected_inputs
from app.schemas.route import RouteRequest
from pdroute_client import Answer, Client, RouteQuery, ServedParams
from pdroute_core.errors import InvalidParams
from pdroute_core.output_defaults import OutputLenDefaults
from pdroute_core.output_learning import OutputLearningConfig
from pdroute_core.request_defaults import RouteDefaults, route_inputs
from tests.app.conftest import Running

DOC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "vectors-v1.json").read_text()
)
SERVICE = next(s for s in DOC["services"] if s["default_output_len_by_prompt"])


def body(**changes: Any) -> dict[str, Any]:
    p = DOC["params"][SERVICE["params"]]
    out = {**SERVICE, "params_id": p["params_id"], "params": p["document"], **changes}
    return {k: v for k, v in out.items() if v is not ...}


def test_the_table_is_read_and_applied() -> None:
    sp = ServedParams.from_body(body())
    assert (
        sp.output_table is not None and sp.output_table.to_json() == SERVICE["default_output_len_by_prompt"]
    )
    table = sp.output_table
    defaults = RouteDefaults(sp.default_output_len, None, None, table)
    for prompt_len in (1, 1023, 1024, 2048, 5000, 8192, 100_000):
        query = RouteQuery(prompt_len=prompt_len, system_load=3)
        got = query.inputs(sp.output_len, None, None)
        assert got.predicted_output_len == table.for_prompt(prompt_len)
        req = RouteRequest.model_validate({"prompt_len": prompt_len, "system_load": 3})
        assert got == route_inputs(req, defaults)
        told = RouteQuery(prompt_len=prompt_len, system_load=3, predicted_output_len=7)
        assert told.inputs(sp.output_len, None, None).predicted_output_len == 7


@pytest.mark.parametrize("value", [..., []])
def test_absent_or_empty_means_no_table(value: Any) -> None:
    sp = ServedParams.from_body(body(default_output_len_by_prompt=value))
    assert sp.output_table is None and sp.output_len == sp.default_output_len
    assert RouteQuery(prompt_len=5000, system_load=3).inputs(
        sp.output_len, None, None
    ).predicted_output_len == (sp.default_output_len)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("1024:340", "expected a list"),
        ([[1024, "340"]], "default_output_len_by_prompt[0]: expected [min_prompt_len, tokens] integers"),
        ([[1024, 0]], "default_output_len_by_prompt[0]: tokens must be in"),
        ([[-1, 5]], "min_prompt_len must be in"),
        ([[8, 1], [8, 2]], "min_prompt_len 8 given twice"),
    ],
)
def test_a_bad_table_is_refused(value: Any, needle: str) -> None:
    with pytest.raises(InvalidParams) as info:
        ServedParams.from_body(body(default_output_len_by_prompt=value))
    assert str(info.value).startswith("/params default_output_len_by_prompt") and needle in str(info.value)


def test_inputs_takes_an_output_table_or_a_length() -> None:
    query = RouteQuery(prompt_len=3000, system_load=1)
    assert query.inputs(OutputLenDefaults(50, ((2048, 80),)), None, None).predicted_output_len == 80
    assert query.inputs(OutputLenDefaults(50, ((4096, 80),)), None, None).predicted_output_len == 50
    assert query.inputs(77, None, None).predicted_output_len == 77


def learnt(outputs: tuple[int, ...], config: OutputLearningConfig) -> OutputLearningState:
    """The service's state after requests of 3000 prompt tokens told 200 produced ``outputs``."""
    state = OutputLearningState(config, lru_size=16, refresh_every=1, refresh_seconds=1e9, clock=lambda: 0.0)
    for o in outputs:
        state.feedback(o, prompt_len=3000, told_len=200)
    state.feedback(60, prompt_len=300, told_len=200)  # bucket [256, 512): below the minimum
    return state


@pytest.mark.parametrize("value", [..., None, OFF_SUMMARY])
def test_absent_or_off_means_no_output_correction(value: Any) -> None:
    sp = ServedParams.from_body(body(output_len_learning=value))
    query = RouteQuery(prompt_len=3000, system_load=3, predicted_output_len=200)
    assert sp.output_learning is None and sp.inputs(query) == query.inputs(sp.output_len, None, None)


def test_the_local_inputs_are_corrected_as_the_service_corrects_them() -> None:
    state = learnt((37, 41, 52, 60), OutputLearningConfig(window=8, min_observations=4))
    sp = ServedParams.from_body(body(output_len_learning=json.loads(json.dumps(state.summary()))))
    assert sp.output_learning is not None and sp.output_learning.ratio(3000) == 190 / 800
    defaults = RouteDefaults(sp.default_output_len, None, None, sp.output_table)
    changed = 0
    for prompt_len in (1, 300, 2047, 2048, 3000, 4095, 4096, 100_000):
        for told in (None, 1, 2, 7, 200, 333, 1_000_000):
            query = RouteQuery(prompt_len=prompt_len, system_load=3, predicted_output_len=told)
            req = RouteRequest.model_validate(query.body())
            service = corrected_inputs(state, route_inputs(req, defaults), None)
            assert sp.inputs(query) == service
            changed += service != route_inputs(req, defaults)
    assert changed == 3 * 6  # the 3 prompts in [2048, 4096), every told length but 1 (default included)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("correct", "/params output_len_learning: expected an object"),
        ({"mode": "learn", "buckets": []}, "/params output_len_learning.mode: expected 'off' or 'correct'"),
        ({"mode": "correct", "buckets": []}, "/params output_len_learning.window: expected an integer"),
        (
            {"mode": "correct", "window": 8, "min_observations": 4, "max_ratio": 8.0, "buckets": [{}]},
            "/params output_len_learning.buckets[0].min_prompt_len: expected a power of two",
        ),
    ],
)
def test_a_bad_output_learning_section_is_refused(section: Any, message: str) -> None:
    with pytest.raises(InvalidParams) as info:
        ServedParams.from_body(body(output_len_learning=section))
    assert str(info.value).startswith(message)


# The service corrects the told output length per prompt bucket; calibration carries /feedback
# and is frozen at 1 (its corrections are not under test here).
LEARNING = {
    "calibration_enabled": True,
    "calibration_min_observations": 1_000_000,
    "calibration_refresh_every": 1,
    "output_len_learning": "correct",
    "output_len_window": 8,
    "output_len_min_observations": 4,
    "default_output_len_by_prompt": "1024:340,2048:80",
}
TAUGHT = {"prompt_len": 3000, "predicted_output_len": 200, "system_load": 8, "decode_batch_size": 8}
IN_BUCKET = [
    RouteQuery(prompt_len=3000, system_load=8, decode_batch_size=8, predicted_output_len=200),
    RouteQuery(prompt_len=2048, system_load=24, predicted_output_len=333),
    RouteQuery(prompt_len=4095, system_load=2, prefill_queue_requests=3, prefill_queue_tokens=9000),  # table
    RouteQuery(prompt_len=2500, system_load=8, predicted_output_len=1000, request_id="in-4"),
]
OUTSIDE = [
    RouteQuery(prompt_len=300, system_load=8, predicted_output_len=200),  # a bucket below the minimum
    RouteQuery(prompt_len=4096, system_load=8, predicted_output_len=200),
    RouteQuery(prompt_len=1500, system_load=4),
]
SAME = ("decision", "reason", "model", "params_id", "t_collocated_ms", "t_disaggregated_ms", "meets_slo")


def decided(a: Answer) -> tuple[Any, ...]:
    return (*(getattr(a, k) for k in SAME), a.assumed, dict(a.breakdown), a.request_id)


def test_a_service_learning_output_lengths_and_the_local_tier_decide_alike(
    start_service: Callable[..., Running], queue_aware_params_file: Path
) -> None:
    service = start_service(params_path=queue_aware_params_file, **LEARNING)
    with httpx.Client(base_url=service.url) as http:
        items = [
            {"inputs": TAUGHT, "path": "collocated", "e2e_ms": 900.0, "output_tokens": o}
            for o in (37, 41, 52, 60)
        ]
        items.append(
            {
                "inputs": {**TAUGHT, "prompt_len": 300},
                "path": "collocated",
                "e2e_ms": 90.0,
                "output_tokens": 9,
            }
        )
        assert http.post("/feedback/batch", json={"items": items}).status_code == 202
        served = http.get("/params").json()
    buckets = served["output_len_learning"]["buckets"]
    assert [(b["min_prompt_len"], b["ratio"], b["told_tokens"]) for b in buckets] == [
        (256, 1.0, None),
        (2048, 190 / 800, 800),
    ]
    # Without the correction the local tier would answer otherwise in the bucket, alike outside it.
    uncorrected = ServedParams.from_body({**served, "output_len_learning": None})
    queries = [*IN_BUCKET, *OUTSIDE]
    with Client(service.url, deadline_s=2.0) as client:
        assert client.wait_for_params(10)
        assert client.params is not None and client.params.output_learning is not None
        remote = [client.route(q) for q in queries]
        remote_batch = client.route_batch(queries)
        assert {a.tier for a in [*remote, *remote_batch]} == {"remote"}
        service.stop()
        local = [client.route(q) for q in queries]
        local_batch = client.route_batch(queries)
    assert {a.tier for a in [*local, *local_batch]} == {"local"}
    assert [decided(a) for a in local] == [decided(a) for a in remote]
    assert (
        [decided(a) for a in local_batch]
        == [decided(a) for a in remote_batch]
        == [decided(a) for a in remote]
    )
    plain = [uncorrected.decide(q, "local") for q in queries]
    n = len(IN_BUCKET)
    for a, b in zip(plain[:n], remote[:n], strict=True):
        assert (a.t_collocated_ms, a.t_disaggregated_ms) != (b.t_collocated_ms, b.t_disaggregated_ms)
    assert [decided(a) for a in plain[n:]] == [decided(a) for a in remote[n:]]
