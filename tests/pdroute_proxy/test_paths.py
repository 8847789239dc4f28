"""The proxy's decision paths over real HTTP: collocated, the ExampleConnector hand-off (prompt
plus first token; the bare prompt at a block multiple), the NixlConnector round trip, streamed
and whole answers. The fake engines' tokens depend on the whole sequence, so every path must
give exactly the tokens of one engine generating alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.pdroute_proxy.conftest import Proxy, start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine, next_token


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    out = list(prompt)
    for _ in range(max_tokens):
        out.append(next_token(out))
    return out[len(prompt) :]


def stream_tokens(proxy: Proxy, body: dict[str, Any]) -> tuple[list[int], list[dict[str, Any]]]:
    """The streamed answer's token ids and its events (``[DONE]`` checked)."""
    events: list[dict[str, Any]] = []
    with (
        proxy.client() as client,
        client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r,
    ):
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        events.append(orjson.loads(line[6:]))
    ids = [t for e in events for c in e["choices"] for t in c.get("token_ids", [])]
    return ids, events


def prompt_of(n: int, start: int = 1) -> list[int]:
    return list(range(start, start + n))


@pytest.mark.parametrize("stream", [True, False])
def test_collocated_is_one_call_to_the_decode_engine(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine], stream: bool
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        body = {"model": "fake-model", "prompt": prompt_of(20), "max_tokens": 8, "return_token_ids": True}
        if stream:
            ids, events = stream_tokens(proxy, body)
            assert events[-1]["choices"][0]["finish_reason"] == "length"
        else:
            with proxy.client() as client:
                r = client.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            ids = r.json()["choices"][0]["token_ids"]
            assert r.json()["usage"] == {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
        assert ids == reference(prompt_of(20), 8)
        assert prefill.requests == []
        assert [(len(b["prompt"]), b["max_tokens"]) for b in decode.requests] == [(20, 8)]
        assert (
            proxy.metric("pdroute_proxy_decisions_total", path="collocated", reason="always_collocated") == 1
        )
    finally:
        proxy.stop()


def test_example_connector_sends_prompt_plus_first_token(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        prompt = prompt_of(20)  # not a multiple of the block size (16)
        ids, _ = stream_tokens(proxy, {"prompt": prompt, "max_tokens": 8, "return_token_ids": True})
        assert ids == reference(prompt, 8)
        (p,) = prefill.requests
        assert (p["prompt"], p["max_tokens"], p["stream"], p["return_token_ids"]) == (prompt, 1, False, True)
        (d,) = decode.requests
        assert d["prompt"] == [*prompt, ids[0]]
        assert d["max_tokens"] == 7
        assert "kv_transfer_params" not in d
        assert proxy.metric("pdroute_proxy_decisions_total", path="disaggregated") == 1
        assert proxy.metric("pdroute_proxy_ttft_seconds_count", path="disaggregated") == 1
    finally:
        proxy.stop()


def test_example_connector_sends_the_bare_prompt_at_a_block_multiple(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        prompt = prompt_of(32)
        ids, events = stream_tokens(proxy, {"prompt": prompt, "max_tokens": 8, "return_token_ids": True})
        assert ids == reference(prompt, 8)  # the decode engine's repeat of the first token dropped
        assert sum(len(c.get("token_ids", [])) for e in events for c in e["choices"]) == 8
        (d,) = decode.requests
        assert (d["prompt"], d["max_tokens"]) == (prompt, 8)
    finally:
        proxy.stop()


def test_nixl_kv_transfer_params_round_trip(tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated", kv_connector="nixl")
    try:
        prompt = prompt_of(20)
        with proxy.client() as client:
            r = client.post(
                "/v1/completions", json={"prompt": prompt, "max_tokens": 6, "return_token_ids": True}
            )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["token_ids"] == reference(prompt, 6)
        (p,) = prefill.requests
        assert p["kv_transfer_params"]["do_remote_decode"] is True
        (d,) = decode.requests
        assert d["prompt"] == prompt and d["max_tokens"] == 6
        # The decode engine got exactly what the prefill engine answered, and pulled the KV with it.
        assert decode.kv_pulled == [d["kv_transfer_params"]]
        assert d["kv_transfer_params"]["remote_engine_id"] == "p0"
        assert d["kv_transfer_params"]["remote_port"] == prefill.port
    finally:
        proxy.stop()


def test_one_token_answers_come_from_the_prefill_engine_alone(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        with proxy.client() as client:
            r = client.post(
                "/v1/completions", json={"prompt": prompt_of(5), "max_tokens": 1, "return_token_ids": True}
            )
        assert r.json()["choices"][0]["token_ids"] == reference(prompt_of(5), 1)
        assert len(prefill.requests) == 1 and decode.requests == []
    finally:
        proxy.stop()


def test_usage_event_only_when_asked(tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        _, plain = stream_tokens(proxy, {"prompt": prompt_of(4), "max_tokens": 3})
        assert all(e["choices"] for e in plain)
        assert "token_ids" not in plain[0]["choices"][0]  # not asked for
        _, with_usage = stream_tokens(
            proxy, {"prompt": prompt_of(4), "max_tokens": 3, "stream_options": {"include_usage": True}}
        )
        assert with_usage[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    finally:
        proxy.stop()


def test_decisions_show_each_requests_path_and_latencies(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        body = {"model": "fake-model", "prompt": prompt_of(40), "max_tokens": 6, "return_token_ids": True}
        ids, _ = stream_tokens(proxy, body)
        with proxy.client() as client:
            (d,) = client.get("/decisions").json()["decisions"]
    finally:
        proxy.stop()
    assert len(ids) == 6
    assert (d["decided"], d["served"], d["fallbacks"]) == ("disaggregated", "disaggregated", [])
    assert (d["prompt_len"], d["output_tokens"], d["outcome"]) == (40, 6, "ok")
    # The fake decode engine waits token_delay_s between tokens: the TPOT is at least that.
    assert d["tpot_ms"] >= decode.token_delay_s * 1e3 * 0.9
    assert d["ttft_ms"] > 0


def test_a_streamed_answer_has_its_headers_once_the_engine_accepted(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    # The decode engine answers 200 at once and holds its first token (its prefill) until the
    # client has the proxy's headers: a proxy that waited for the token would time out here.
    prefill, decode = fakes
    gate = threading.Event()
    decode.first_token_gate = gate
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        body = {"prompt": prompt_of(20), "max_tokens": 2, "stream": True, "return_token_ids": True}
        with (
            httpx.Client(base_url=proxy.url, timeout=10.0) as client,
            client.stream("POST", "/v1/completions", json=body) as r,
        ):
            assert r.status_code == 200 and not gate.is_set()
            assert r.headers["content-type"].startswith("text/event-stream")
            gate.set()
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and len(lines) == 3
    finally:
        gate.set()
        proxy.stop()


def test_the_completion_endpoints_are_documented_and_other_methods_are_405(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        with proxy.client() as client:
            paths = client.get("/openapi.json").json()["paths"]
            for path, model in (
                ("/v1/completions", "CompletionRequest"),
                ("/v1/chat/completions", "ChatRequest"),
            ):
                schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
                assert schema["$ref"].endswith(model)
                assert client.get(path).status_code == 405
    finally:
        proxy.stop()
