"""The served model's admission advice at the proxy: counted always, acted on when shedding is on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdroute_proxy.errors import Shed
from pdroute_proxy.responses import answer_of
from tests.pdroute_proxy.conftest import start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine

BODY = {
    "model": "fake-model",
    "prompt": list(range(1, 401)),
    "max_tokens": 8,
    "ignore_eos": True,
    "return_token_ids": True,
}


@pytest.mark.parametrize("control", ["off", "shed"])
def test_a_request_no_path_can_serve_in_time_is_shed_only_when_shedding_is_on(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine], control: str
) -> None:
    prefill, decode = fakes
    # A TTFT target no prefill of 400 tokens can make: the model advises shedding every request.
    proxy = start_proxy(
        tmp_path,
        [prefill],
        [decode],
        admission_control=control,
        default_ttft_slo_ms=0.01,
        default_tpot_slo_ms=50.0,
    )
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json=BODY)
        assert proxy.metric("pdroute_proxy_admissions_total", admission="shed") == 1
        assert proxy.metric("pdroute_proxy_admissions_total", admission="admit") == 0
        # Sent to d0 (served or shed), not expected in time, no token in time: not counted.
        ledger = proxy.app.state.ledger
        assert ledger.feasible_routes("d0", ledger.clock(), 0.01) == 0
        if control == "off":
            assert r.status_code == 200, r.text
            assert len(r.json()["choices"][0]["token_ids"]) == 8
            assert proxy.metric("pdroute_proxy_requests_total", outcome="ok") == 1
            assert len(decode.requests) == 1  # served, by whichever path was chosen
        else:
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert error["type"] == "overloaded" and "past its TTFT target" in error["message"]
            assert 1 <= int(r.headers["retry-after"]) <= 60
            assert prefill.requests == [] and decode.requests == []  # no engine was called
            assert proxy.metric("pdroute_proxy_requests_total", outcome="shed") == 1
        with proxy.client() as client:  # the operator sees why, shed or served
            (d,) = client.get("/decisions").json()["decisions"]
        assert (d["admission"], d["prompt_len"]) == ("shed", 400)
        assert d["predicted_lateness_ms"] > 0
        if control == "off":
            assert (d["served"], d["outcome"]) == (d["decided"], "ok")
        else:
            assert (d["served"], d["outcome"], d["engines"], d["ttft_ms"]) == (None, "Shed", [], None)
    finally:
        proxy.stop()


def test_a_request_that_meets_its_targets_is_admitted_with_shedding_on(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(
        tmp_path,
        [prefill],
        [decode],
        admission_control="shed",
        default_ttft_slo_ms=10_000.0,
        default_tpot_slo_ms=1_000.0,
    )
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json=BODY)
        assert r.status_code == 200, r.text
        assert proxy.metric("pdroute_proxy_admissions_total", admission="admit") == 1
        assert proxy.metric("pdroute_proxy_admissions_total", admission="shed") == 0
        # Expected in time: counted on its decode engine (the model's *_feasible_routes).
        ledger = proxy.app.state.ledger
        assert ledger.feasible_routes("d0", ledger.clock(), 10_000.0) == 1
    finally:
        proxy.stop()


def test_static_rules_give_no_advice_and_shed_nothing(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(
        tmp_path, [prefill], [decode], policy="threshold", admission_control="shed", default_ttft_slo_ms=0.01
    )
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json=BODY)
        assert r.status_code == 200, r.text
        assert (
            sum(
                proxy.metric("pdroute_proxy_admissions_total", admission=a)
                for a in ("admit", "defer", "shed")
            )
            == 0
        )
    finally:
        proxy.stop()


@pytest.mark.parametrize(
    ("lateness_ms", "says", "retry_after"),
    [(2500.0, "2500 ms past its TTFT target", "3"), (0.0, "past its TPOT target", "1")],
)
def test_a_shed_answer_names_the_target_it_is_predicted_to_miss(
    lateness_ms: float, says: str, retry_after: str
) -> None:
    status, headers, body = answer_of(Shed(lateness_ms))
    error = json.loads(body)["error"]
    assert (status, error["type"]) == (503, "overloaded")
    assert says in error["message"] and ("TTFT" in error["message"]) == (lateness_ms > 0)
    assert dict(headers)[b"retry-after"] == retry_after.encode()
