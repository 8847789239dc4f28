"""The proxy in front of real vLLM CPU engines (a prefill and a decode engine handing KV over
through ExampleConnector; two collocated engines for the decode failover): every decision
path, streaming, fallbacks and cancellation.

Fresh prompts everywhere (a prefix-cache hit would hide the transfer). Greedy sampling, so that
the disaggregated answer can be compared with the decode engine's own answer token for token.
The test that kills the prefill engine runs last (the fixture then starts the pair again).
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from localfleet import BLOCK_SIZE, Fleet
from pdroute_proxy.app import create_proxy_app
from pdroute_proxy.settings import ProxySettings
from tests.app.conftest import Running, start_server

_seeds = itertools.count(1)


def fresh_prompt(n: int) -> list[int]:
    rng = random.Random(next(_seeds) * 7919 + n)
    return [rng.randrange(1, 31_000) for _ in range(n)]


def engine_metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(url, timeout=10).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


class Proxy:
    def __init__(self, fleet: Fleet, tmp: Path, **settings: Any) -> None:
        self.registry = CollectorRegistry()
        values = {
            "engines_file": fleet.engines_file(tmp / "engines.json"),
            "watch_params": False,
            "kv_block_size": BLOCK_SIZE,
            **settings,
        }
        self.app = create_proxy_app(ProxySettings(**values), registry=self.registry)
        self.server: Running = start_server(self.app)
        self.url = self.server.url

    def metric(self, name: str, **labels: str) -> float:
        return engine_metric(f"{self.url}/metrics", name, **labels)

    def complete(self, prompt: list[int], max_tokens: int, **extra: Any) -> dict[str, Any]:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        r = httpx.post(
            f"{self.url}/v1/completions", json={**body, **extra, "return_token_ids": True}, timeout=120
        )
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer


@pytest.fixture
def proxy_factory(pd_pair: Fleet, tmp_path: Path) -> Iterator[Any]:
    started: list[Proxy] = []

    def make(**settings: Any) -> Proxy:
        proxy = Proxy(pd_pair, tmp_path, **settings)
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.server.stop()
    pd_pair.wipe_kv()


def transferred(fleet: Fleet) -> float:
    return engine_metric(
        fleet["d0"].metrics_url, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"
    )


@pytest.mark.parametrize("prompt_len", [50, 2 * BLOCK_SIZE])  # prompt + first token, and the bare prompt
def test_disaggregated_hands_the_kv_over_and_matches_the_decode_engine(
    pd_pair: Fleet, proxy_factory: Any, prompt_len: int
) -> None:
    proxy = proxy_factory(policy="disaggregated")
    prompt = fresh_prompt(prompt_len)
    before = transferred(pd_pair)
    via = proxy.complete(prompt, 8)["choices"][0]["token_ids"]
    moved = transferred(pd_pair) - before
    # Every whole block of the decode request's prompt came over the connector, not recomputed.
    sent = prompt_len if prompt_len % BLOCK_SIZE == 0 else prompt_len + 1
    assert moved == ((sent - 1) // BLOCK_SIZE) * BLOCK_SIZE > 0
    direct = httpx.post(
        f"{pd_pair['d0'].url}/v1/completions",
        json={
            "prompt": prompt,
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
        timeout=120,
    ).json()["choices"][0]["token_ids"]
    assert via == direct and len(via) == 8
    assert proxy.metric("pdroute_proxy_decisions_total", path="disaggregated") == 1
    assert proxy.metric("pdroute_proxy_fallbacks_total") == 0


def test_threshold_rule_takes_both_paths(pd_pair: Fleet, proxy_factory: Any) -> None:
    proxy = proxy_factory(policy="threshold", threshold_tokens=100)
    before = transferred(pd_pair)
    proxy.complete(fresh_prompt(40), 4)
    assert transferred(pd_pair) == before  # collocated: nothing handed over
    proxy.complete(fresh_prompt(300), 4)
    assert transferred(pd_pair) > before
    assert proxy.metric("pdroute_proxy_decisions_total", reason="prompt_within_threshold") == 1
    assert proxy.metric("pdroute_proxy_decisions_total", reason="prompt_over_threshold") == 1


def test_pdroute_policy_decides_from_the_scrape_and_its_own_accounting(
    pd_pair: Fleet, proxy_factory: Any
) -> None:
    proxy = proxy_factory(policy="pdroute", scrape_interval_s=0.1)
    time.sleep(0.5)  # a scrape round or two
    for n in (40, 600):
        proxy.complete(fresh_prompt(n), 4)
    decisions = httpx.get(f"{proxy.url}/decisions").json()["decisions"]
    assert [d["outcome"] for d in decisions] == ["ok", "ok"]
    sources = decisions[-1]["sources"]
    assert sources["decode_batch_size"] == "scrape:d0" and sources["decode_context_tokens"] == "scrape:d0"
    assert sources["prefill_queue_tokens"] == "proxy" and sources["pending_prefill_tokens"] == "proxy"
    assert decisions[-1]["decided_by"] in ("queue-aware", "design")
    assert proxy.metric("pdroute_proxy_decisions_total") == 2


def test_streaming_sends_the_prefill_engines_token_first(pd_pair: Fleet, proxy_factory: Any) -> None:
    proxy = proxy_factory(policy="disaggregated")
    body = {
        "prompt": fresh_prompt(100),
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{proxy.url}/v1/completions", json={**body, "return_token_ids": True}, timeout=60
    ) as r:
        events = [orjson.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    ids = [t for e in events for t in e["choices"][0]["token_ids"]]
    assert len(ids) == 12 and events[-1]["choices"][0]["finish_reason"] == "length"
    assert len(events) == 12  # one event per token


def test_a_client_that_disconnects_cancels_the_engines_request(pd_pair: Fleet, proxy_factory: Any) -> None:
    proxy = proxy_factory(policy="collocated")
    body = {"prompt": fresh_prompt(64), "max_tokens": 3000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{proxy.url}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        assert sum(1 for _, line in zip(range(8), lines, strict=False) if line.startswith("data:")) >= 3
    deadline = time.monotonic() + 20
    running = engine_metric(pd_pair["d0"].metrics_url, "vllm:num_requests_running")
    while running > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        running = engine_metric(pd_pair["d0"].metrics_url, "vllm:num_requests_running")
    assert running == 0  # aborted long before its 3000 tokens (~40 s at this engine's pace)
    assert proxy.metric("pdroute_proxy_requests_total", outcome="cancelled") == 1


def test_prefill_engine_killed_mid_replay_loses_nothing(pd_pair: Fleet, proxy_factory: Any) -> None:
    proxy = proxy_factory(policy="disaggregated", prefill_timeout_s=20)
    num_requests = 24

    def one(i: int) -> int:
        time.sleep(0.15 * i)
        return len(proxy.complete(fresh_prompt(120 + i), 6)["choices"][0]["token_ids"])

    with ThreadPoolExecutor(max_workers=num_requests) as pool:
        futures = [pool.submit(one, i) for i in range(num_requests)]
        time.sleep(1.5)
        pd_pair["p0"].stop()
        counts = [f.result() for f in futures]
    assert counts == [6] * num_requests  # every request answered in full
    assert proxy.metric("pdroute_proxy_requests_total", outcome="ok") == num_requests
    assert proxy.metric("pdroute_proxy_decisions_total", path="disaggregated") == num_requests
    decisions = httpx.get(f"{proxy.url}/decisions").json()["decisions"]
    assert len(decisions) == num_requests
    causes = [d["fallbacks"] for d in decisions]
    # Served collocated exactly when the prefill engine failed it (and then only that once).
    for d in decisions:
        prefill_failed = [c for c in d["fallbacks"] if c.startswith("prefill_")]
        assert (d["served"] == "collocated") == bool(prefill_failed), causes
        assert len(prefill_failed) <= 1, causes
    collocated = sum(d["served"] == "collocated" for d in decisions)
    assert collocated >= 1, causes  # the kill happened mid-replay
    assert proxy.metric("pdroute_proxy_ttft_seconds_count", path="collocated") == collocated
    total = sum(len(c) for c in causes)
    assert proxy.metric("pdroute_proxy_fallbacks_total") == total


def test_a_decode_engine_killed_mid_answer_is_resumed_on_the_other(
    collocated_pair: Fleet, tmp_path: Path
) -> None:
    proxy = Proxy(collocated_pair, tmp_path, policy="collocated", read_timeout_s=20)
    prompt, num_tokens = fresh_prompt(90), 120
    body = {"prompt": prompt, "max_tokens": num_tokens, "temperature": 0, "ignore_eos": True}
    tokens: list[int] = []
    killed = ""
    try:
        with httpx.stream(
            "POST",
            f"{proxy.url}/v1/completions",
            json={**body, "stream": True, "return_token_ids": True},
            timeout=120,
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                tokens.extend(orjson.loads(line[6:])["choices"][0].get("token_ids") or [])
                if not killed and len(tokens) >= 10:
                    running = {
                        name: engine_metric(e.metrics_url, "vllm:num_requests_running")
                        for name, e in collocated_pair.engines.items()
                    }
                    (killed,) = [name for name, n in running.items() if n == 1]
                    collocated_pair[killed].stop(grace_s=0)
        survivor = next(name for name in collocated_pair.engines if name != killed)
        assert len(tokens) == num_tokens  # the answer went on, on the other engine
        (decision,) = httpx.get(f"{proxy.url}/decisions").json()["decisions"]
        assert decision["fallbacks"] == ["decode_lost"] and decision["engines"] == [killed, survivor]
        assert proxy.metric("pdroute_proxy_requests_total", outcome="ok") == 1
        # Resumed from the prompt plus the tokens already sent: greedy, it is the survivor's answer.
        direct = httpx.post(
            f"{collocated_pair[survivor].url}/v1/completions",
            json={**body, "model": "tiny", "return_token_ids": True},
            timeout=120,
        ).json()["choices"][0]["token_ids"]
        assert tokens == direct
    finally:
        proxy.server.stop()
