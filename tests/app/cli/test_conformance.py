"""The conformance vectors: the shipped file is current, covers what it claims, and the service
(over HTTP) and the client's local tier (on params fetched from that service) reproduce it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.conformance import (
    CONFIGS,
    LONG_CONTEXT,
    SHIPPED_PARAMS,
    TEST_PARAMS,
    build_vectors,
    dumps,
    params_path,
)
from app.cli.main import main
from app.settings import embedded_params_path
from pdroute_client import Client, RouteQuery
from pdroute_core.routing import design, queue_aware
from tests.app.conftest import LiveServer

SHIPPED = Path(__file__).resolve().parents[3] / "conformance" / "vectors-v1.json"
DOC: dict[str, Any] = json.loads(SHIPPED.read_text())


def test_the_shipped_file_is_current() -> None:
    # A change to a model, a params file or the generator must come with the regenerated file
    # (scripts/make-conformance.sh).
    assert dumps(build_vectors()) == SHIPPED.read_text()


def test_the_command_writes_the_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.json"
    assert main(["conformance", "-o", str(out)]) == 0
    assert out.read_bytes() == SHIPPED.read_bytes()
    assert f"({len(DOC['vectors'])} vectors)" in capsys.readouterr().out


def test_coverage() -> None:
    vectors = DOC["vectors"]
    services = {s["id"]: s for s in DOC["services"]}
    by_model: dict[str, set[str]] = {}
    for v in vectors:
        by_model.setdefault(services[v["service"]]["model"], set()).add(v["expected"]["reason"])
    assert by_model == {design.NAME: set(design.REASONS), queue_aware.NAME: set(queue_aware.REASONS)}
    assert {(s["params"], s["model"]) for s in services.values()} == {
        (p, m) for p in SHIPPED_PARAMS for m in (design.NAME, queue_aware.NAME)
    } | {(p, queue_aware.NAME) for p in TEST_PARAMS}
    qa = [v["expected"] for v in vectors if services[v["service"]]["model"] == queue_aware.NAME]
    assert {e["meets_slo"] for e in qa} == {True, False}
    assert {e["decision"] for e in qa} == {"collocated", "disaggregated"}
    # The bare request (every optional input missing) under every configuration.
    bare = [v for v in vectors if set(v["request"]) == {"prompt_len", "system_load"}]
    assert {v["service"] for v in bare} == set(services)
    assert any(services[v["service"]]["default_ttft_slo_ms"] is not None for v in bare)
    for name, entry in DOC["params"].items():
        assert entry["document"] == json.loads(params_path(name).read_text())
    assert params_path(SHIPPED_PARAMS[0]) == embedded_params_path()


def test_the_long_context_params_exercise_the_attention_terms() -> None:
    # Vectors under params with both attention terms, on long prompts, reaching both decisions.
    for name in TEST_PARAMS:
        forms = DOC["params"][name]["document"]["queue_aware"]
        assert forms["prefill_ms_per_token_sq"] > 0 and forms["chunk_ms_per_token_prefix"] > 0
    services = {s["id"]: s for s in DOC["services"]}
    long = [
        v
        for v in DOC["vectors"]
        if services[v["service"]]["params"] in TEST_PARAMS and v["request"] in LONG_CONTEXT
    ]
    assert len(long) == len(LONG_CONTEXT) * sum(c.params in TEST_PARAMS for c in CONFIGS)
    assert {v["expected"]["decision"] for v in long} == {"collocated", "disaggregated"}


def test_no_vector_is_a_near_tie() -> None:
    # A port compares latencies within a relative 1e-9: no decision may hinge on less.
    for v in DOC["vectors"]:
        e = v["expected"]
        b = e["breakdown"]
        pair = ("cost_collocated_ms", "cost_disaggregated_ms") if "cost_collocated_ms" in b else None
        a, c = (b[pair[0]], b[pair[1]]) if pair else (e["t_collocated_ms"], e["t_disaggregated_ms"])
        assert abs(a - c) > 1e-8 * max(abs(a), abs(c)), v["id"]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.id)
def test_the_service_and_the_local_tier_reproduce_every_vector(
    make_server: Callable[..., LiveServer], config: Any
) -> None:
    server = make_server(
        params_path=params_path(config.params),
        watch_params=False,
        **config.settings(),
    )
    vectors = [v for v in DOC["vectors"] if v["service"] == config.id]
    assert vectors
    with httpx.Client(base_url=server.url) as http, Client(server.url, start=False) as client:
        assert client.refresh_params()
        served = client.params
        assert served is not None and served.params_id == DOC["params"][config.params]["params_id"]
        for v in vectors:
            expected = v["expected"]
            answer = http.post("/route", json=v["request"]).json()
            assert {k: answer[k] for k in expected} == expected, v["id"]
            local = served.decide(RouteQuery.from_mapping(v["request"]), "local: test")
            got = {
                "decision": local.decision,
                "reason": local.reason,
                "t_collocated_ms": local.t_collocated_ms,
                "t_disaggregated_ms": local.t_disaggregated_ms,
                "assumed": list(local.assumed),
                "breakdown": dict(local.breakdown),
            }
            for name in ("meets_slo", "predicted_lateness_ms", "admission", "objective"):
                if name in expected:
                    got[name] = getattr(local, name)
            assert got == expected, v["id"]
