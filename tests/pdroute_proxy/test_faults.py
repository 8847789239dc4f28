"""No request lost: every upstream failure the proxy can meet, over real HTTP, each counted."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import httpx
import orjson

from tests.pdroute_proxy.conftest import start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine, Faults
from tests.pdroute_proxy.test_paths import prompt_of, reference, stream_tokens

BODY = {"prompt": prompt_of(20), "max_tokens": 8, "return_token_ids": True}
EXPECTED = reference(prompt_of(20), 8)


def test_prefill_5xx_is_served_collocated(tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]) -> None:
    prefill, decode = fakes
    prefill.faults = Faults(status=500)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        ids, _ = stream_tokens(proxy, BODY)
        assert ids == EXPECTED
        assert [(len(b["prompt"]), b["max_tokens"]) for b in decode.requests] == [(20, 8)]
        assert proxy.metric("pdroute_proxy_fallbacks_total", cause="prefill_error") == 1
        assert proxy.metric("pdroute_proxy_upstream_errors_total", engine="p0", kind="http_5xx") == 1
        assert proxy.metric("pdroute_proxy_ttft_seconds_count", path="collocated") == 1
    finally:
        proxy.stop()


def test_a_hanging_prefill_engine_times_out_to_collocated(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    prefill.faults = Faults(hang_s=5.0)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated", prefill_timeout_s=0.3)
    try:
        ids, _ = stream_tokens(proxy, BODY)
        assert ids == EXPECTED
        assert proxy.metric("pdroute_proxy_fallbacks_total", cause="prefill_timeout") == 1
    finally:
        proxy.stop()


def test_a_prefill_engine_down_is_skipped_until_it_may_be_back(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated", down_s=60.0)
    prefill.stop()
    try:
        for _ in range(3):
            ids, _ = stream_tokens(proxy, BODY)
            assert ids == EXPECTED
        # The first request found it down; the next two did not try it again.
        assert proxy.metric("pdroute_proxy_upstream_errors_total", engine="p0", kind="connect") == 1
        assert proxy.metric("pdroute_proxy_fallbacks_total", cause="prefill_down") == 3
    finally:
        proxy.stop()


def test_kv_handoff_failure_is_resumed_without_the_kv(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    decode.faults = Faults(decode_status_with_kv=500)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated", kv_connector="nixl")
    try:
        ids, _ = stream_tokens(proxy, BODY)
        assert ids == EXPECTED
        first, retry = decode.requests
        assert "kv_transfer_params" in first
        assert "kv_transfer_params" not in retry
        assert (retry["prompt"], retry["max_tokens"]) == ([*prompt_of(20), EXPECTED[0]], 7)
        assert proxy.metric("pdroute_proxy_fallbacks_total", cause="kv_handoff") == 1
    finally:
        proxy.stop()


def test_a_decode_engine_dying_mid_answer_is_resumed_on_another(tmp_path: Path) -> None:
    d0, d1 = FakeEngine("d0", faults=Faults(die_after_tokens=3)), FakeEngine("d1")
    proxy = start_proxy(tmp_path, [], [d0, d1], policy="collocated")
    try:
        ids, _ = stream_tokens(proxy, BODY)
        assert ids == EXPECTED
        (resumed,) = d1.requests
        assert (resumed["prompt"], resumed["max_tokens"]) == ([*prompt_of(20), *EXPECTED[:3]], 5)
        assert proxy.metric("pdroute_proxy_fallbacks_total", cause="decode_lost") == 1
    finally:
        proxy.stop()
        d0.stop()
        d1.stop()


def test_a_decode_engine_down_fails_over(tmp_path: Path) -> None:
    d0, d1 = FakeEngine("d0"), FakeEngine("d1")
    proxy = start_proxy(tmp_path, [], [d0, d1], policy="collocated")
    d0.stop()
    try:
        for _ in range(2):
            ids, _ = stream_tokens(proxy, BODY)
            assert ids == EXPECTED
        assert len(d1.requests) == 2
        assert (
            proxy.metric("pdroute_proxy_fallbacks_total", cause="decode_down") == 1
        )  # then d0 is tried last
    finally:
        proxy.stop()
        d1.stop()


def test_every_engine_down_is_a_clear_503_and_the_proxy_recovers(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    prefill.stop()
    decode.stop()
    try:
        with proxy.client() as client:
            for stream in (False, True):
                r = client.post("/v1/completions", json={**BODY, "stream": stream})
                assert r.status_code == 503
                error = r.json()["error"]
                assert error["type"] == "no_engine" and "d0" in error["message"]
            assert client.get("/v1/models").status_code == 503
            assert client.get("/health").status_code == 200
        decode.start()  # the same port again
        ids, _ = stream_tokens(proxy, BODY)
        assert ids == EXPECTED
        assert proxy.metric("pdroute_proxy_requests_total", outcome="no_engine") == 2
    finally:
        proxy.stop()


def test_an_engine_4xx_reaches_the_client(tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]) -> None:
    prefill, decode = fakes
    decode.faults = Faults(status=404)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json=BODY)
        assert r.status_code == 404
        assert r.json()["error"]["message"] == "injected"
    finally:
        proxy.stop()


def test_a_client_that_disconnects_cancels_the_upstream_request(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    decode.token_delay_s = 0.05
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        with httpx.Client(base_url=proxy.url, timeout=10) as client:
            body = {"prompt": prompt_of(20), "max_tokens": 500, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as r:
                lines = r.iter_lines()
                got = [line for line in (next(lines) for _ in range(6)) if line.startswith("data: ")]
                assert len(got) >= 2
        deadline = time.monotonic() + 10
        while decode.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert decode.cancelled == 1 and decode.running == 0
        while (
            proxy.metric("pdroute_proxy_requests_total", outcome="cancelled") < 1
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        assert proxy.metric("pdroute_proxy_requests_total", outcome="cancelled") == 1
        ledger = proxy.app.state.ledger
        assert all(load.in_flight == 0 for load in ledger.engines.values())
        assert proxy.metric("pdroute_proxy_in_flight_requests") == 0
    finally:
        proxy.stop()


def test_a_whole_answer_whose_client_leaves_cancels_upstream(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    decode.token_delay_s = 0.05
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        with httpx.Client(base_url=proxy.url, timeout=0.5) as client, contextlib.suppress(httpx.ReadTimeout):
            client.post("/v1/completions", json={"prompt": prompt_of(20), "max_tokens": 500})
        deadline = time.monotonic() + 10
        while decode.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert decode.cancelled == 1
    finally:
        proxy.stop()


def test_a_decode_engine_failing_after_it_accepted_ends_the_stream_with_an_error_event(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    # The engine answered 200, so the client already has its headers: no 503 any more, but an
    # error event naming the cause, then [DONE].
    prefill, decode = fakes
    decode.faults = Faults(die_after_tokens=0)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated", max_retries=1)
    try:
        with (
            proxy.client() as client,
            client.stream("POST", "/v1/completions", json={**BODY, "stream": True}) as r,
        ):
            assert r.status_code == 200
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        (error_line,) = lines[:-1]
        error = orjson.loads(error_line[6:])["error"]
        assert error["type"] == "no_engine" and error["code"] == 503 and "d0" in error["message"]
        assert len(decode.requests) == 2
        assert proxy.metric("pdroute_proxy_requests_total", outcome="no_engine") == 1
        assert proxy.metric("pdroute_proxy_in_flight_requests") == 0
    finally:
        proxy.stop()


def test_a_client_that_leaves_before_the_first_token_cancels_the_upstream_request(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    gate = threading.Event()  # the engine's first token never comes while the client is there
    decode.first_token_gate = gate
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated", read_timeout_s=30.0)
    try:
        with httpx.Client(base_url=proxy.url, timeout=10) as client:
            body = {"prompt": prompt_of(20), "max_tokens": 4, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200  # the headers; then the client leaves
        deadline = time.monotonic() + 10
        while decode.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert decode.cancelled == 1 and decode.running == 0 and not gate.is_set()
        assert proxy.metric("pdroute_proxy_requests_total", outcome="cancelled") == 1
        assert all(load.in_flight == 0 for load in proxy.app.state.ledger.engines.values())
    finally:
        gate.set()
        proxy.stop()
