"""End to end over real uvicorn + httpx: /route requests that name engines instead of loads.

vLLM- and SGLang-format endpoints are real HTTP servers on 127.0.0.1; readings are timed by an
injected clock, so staleness is decided by moving that clock, never by waiting.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import LiveServer, start_server
from tests.app.engines.engine_server import EngineServer
from tests.app.engines.expositions import VLLM_KV_TOKENS, VLLM_RUNNING, sglang_text, vllm_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now


class Service:
    def __init__(self, url: str, registry: CollectorRegistry, clock: FakeClock) -> None:
        self.url = url
        self.registry = registry
        self.clock = clock

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, timeout=10.0)

    def errors(self, target: str) -> float:
        total = 0.0
        for reason in ("connect", "timeout", "http_status"):
            labels = {"target": target, "kind": "vllm" if target == "m0" else "sglang", "reason": reason}
            total += self.registry.get_sample_value("pdroute_engine_scrape_errors_total", labels) or 0.0
        return total


@pytest.fixture
def engines() -> Iterator[dict[str, EngineServer]]:
    started = {
        "m0": EngineServer(vllm_text()),
        "p0": EngineServer(sglang_text(running=1.0, queue=2.0)),
        "p1": EngineServer(sglang_text(running=2.0, queue=5.0)),
    }
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture
def service(
    tmp_path: Path, queue_aware_params_file: Path, engines: dict[str, EngineServer]
) -> Iterator[Service]:
    fleet = {
        "pools": {
            "prefill": [{"id": i, "url": engines[i].url, "kind": "sglang"} for i in ("p0", "p1")],
            "mixed": [{"id": "m0", "url": engines["m0"].url, "kind": "vllm"}],
        }
    }
    path = tmp_path / "engines.json"
    path.write_text(json.dumps(fleet))
    clock, registry = FakeClock(), CollectorRegistry()
    settings = Settings(
        params_path=queue_aware_params_file,
        watch_params=False,
        engines_file=path,
        scrape_interval_s=0.02,
        scrape_timeout_s=0.5,
        engines_stale_s=2.0,
    )
    running = start_server(create_app(settings, registry=registry, monotonic=clock))
    yield Service(running.url, registry, clock)
    running.stop()


NAMES_ONLY = {"prompt_len": 2048, "predicted_output_len": 200, "decode_target": "m0"}
FROM_SCRAPE = (
    "system_load",
    "decode_batch_size",
    "prefill_queue_requests",
    "prefill_running_requests",
    "prefill_pool_gpus",
    "colloc_context_tokens",
    "decode_context_tokens",
)
# Neither vLLM nor SGLang publishes prompt tokens waiting or not yet prefilled.
UNPUBLISHED = ("prefill_queue_tokens", "pending_prefill_tokens", "decode_pending_prefill_tokens")


def wait_for(service: Service, ready: Any, body: dict[str, Any] = NAMES_ONLY) -> dict[str, Any]:
    """Poll /route until ``ready(answer)`` (bounded; nothing about the time it takes is asserted)."""
    for _ in range(1000):
        answer: dict[str, Any] = service.post("/route", body).json()
        if ready(answer):
            return answer
        time.sleep(0.01)
    raise AssertionError(f"never ready: {answer}")


def all_scraped(answer: dict[str, Any]) -> bool:
    return all(answer["input_sources"][f]["source"] == "scrape" for f in FROM_SCRAPE)


def test_endpoint_ids_only_fresh_scrape_then_stale_assumed(
    service: Service, engines: dict[str, EngineServer]
) -> None:
    answer = wait_for(service, all_scraped)
    sources = answer["input_sources"]
    assert sources["system_load"]["endpoint"] == "m0"
    assert sources["prefill_queue_requests"]["endpoint"] == "pool:prefill"
    assert 0 <= sources["system_load"]["age_ms"] <= 2000.0
    for field in UNPUBLISHED:
        assert sources[field] == {"source": "assumed"}
    assert set(answer["assumed"]) >= set(UNPUBLISHED)
    assert "prefill_queue_requests" not in answer["assumed"]
    # The decision is the one the caller would get sending the scraped values itself.
    sent = {
        **NAMES_ONLY,
        "system_load": VLLM_RUNNING,
        "decode_batch_size": VLLM_RUNNING,
        "prefill_queue_requests": 7,
        "prefill_running_requests": 3,
        "prefill_pool_gpus": 2,
        "colloc_context_tokens": VLLM_KV_TOKENS,
        "decode_context_tokens": VLLM_KV_TOKENS,
    }
    by_caller = service.post("/route", sent).json()
    assert all(by_caller["input_sources"][f]["source"] == "caller" for f in FROM_SCRAPE)
    for key in ("decision", "reason", "t_collocated_ms", "t_disaggregated_ms", "breakdown"):
        assert by_caller[key] == answer[key]
    # A value the caller sends wins over the scrape.
    mine = service.post("/route", {**NAMES_ONLY, "system_load": 0}).json()
    assert mine["input_sources"]["system_load"] == {"source": "caller"}
    assert mine["input_sources"]["decode_batch_size"]["source"] == "scrape"

    # Engines stopped: once a full round has failed on each, move the clock past the limit.
    errors_before = {i: service.errors(i) for i in engines}
    for server in engines.values():
        server.stop()
    for _ in range(1000):
        if all(service.errors(i) >= errors_before[i] + 2 for i in engines):
            break
        time.sleep(0.01)
    with service.clock.lock:
        service.clock.now += 2.5
    stale = service.post("/route", NAMES_ONLY).json()
    assert all(s["source"] == "assumed" for s in stale["input_sources"].values())
    assert stale["decision"] in ("collocated", "disaggregated")
    assert set(stale["assumed"]) >= {
        "prefill_queue_requests",
        "colloc_context_tokens",
        "decode_context_tokens",
    }
    fresh = {
        s.labels["pool"]: s.value
        for family in text_string_to_metric_families(httpx.get(f"{service.url}/metrics").text)
        if family.name == "pdroute_engine_fresh_endpoints"
        for s in family.samples
    }
    assert fresh == {"prefill": 0.0, "decode": 0.0, "mixed": 0.0}
    assert httpx.get(f"{service.url}/readyz").status_code == 200  # readiness ignores the engines


def test_batch_fills_each_item_and_names_bad_ids(service: Service) -> None:
    wait_for(service, all_scraped)
    body = {"requests": [NAMES_ONLY, {"prompt_len": 10, "system_load": 1}]}
    results = service.post("/route/batch", body).json()["results"]
    assert results[0]["input_sources"]["system_load"]["source"] == "scrape"
    assert "input_sources" not in results[1]
    bad = service.post("/route/batch", {"requests": [NAMES_ONLY, {**NAMES_ONLY, "decode_target": "zz"}]})
    assert bad.status_code == 422
    assert "requests.1.decode_target: unknown endpoint 'zz'" in bad.json()["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({**NAMES_ONLY, "decode_target": "nope"}, "decode_target: unknown endpoint 'nope'"),
        ({**NAMES_ONLY, "decode_target": "p0"}, "decode_target: endpoint 'p0' is in pool prefill"),
        ({**NAMES_ONLY, "prefill_target": "gone"}, "prefill_target: unknown endpoint 'gone'"),
        ({**NAMES_ONLY, "decode_target": "bad id!"}, "decode_target"),
        ({"prompt_len": 10}, "system_load: Field required"),
        ({"prompt_len": 10, "prefill_target": "p0"}, "system_load: Field required"),
    ],
)
def test_bad_targets_are_a_422_naming_the_field(service: Service, body: dict[str, Any], says: str) -> None:
    answer = service.post("/route", body)
    assert answer.status_code == 422
    assert says in answer.json()["error"]


def test_targets_without_an_engines_file_are_refused(live_server: LiveServer) -> None:
    answer = httpx.post(f"{live_server.url}/route", json=NAMES_ONLY, timeout=10.0)
    assert answer.status_code == 422
    assert "decode_target: no engines are configured" in answer.json()["error"]


class CountingEngine(EngineServer):
    """A vLLM pod whose prompt-token counter grows at ``rate`` tokens/s of the fake clock; each
    scrape moves the clock on by ``step`` s first, so every reading lies ``step`` after the last."""

    def __init__(self, clock: FakeClock, rate: float, step: float) -> None:
        self.clock, self.rate, self.step = clock, rate, step
        super().__init__("")

    @property
    def text(self) -> str:
        with self.clock.lock:
            self.clock.now += self.step
            count = self.rate * self.clock.now
        return vllm_text(prompt_tokens=(0.75 * count, 0.25 * count))

    @text.setter
    def text(self, value: str) -> None:
        pass  # the counter follows the clock


def test_a_vllm_target_gets_its_prefill_rate_after_two_scrapes(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    rate = 16384.0  # tokens/s; with 0.5 s steps from 1000 s every count is exact in binary
    engine = CountingEngine(clock, rate, 0.5)
    path = tmp_path / "engines.json"
    path.write_text(json.dumps({"pools": {"mixed": [{"id": "m0", "url": engine.url, "kind": "vllm"}]}}))
    settings = Settings(
        params_path=queue_aware_params_file,
        watch_params=False,
        engines_file=path,
        scrape_interval_s=0.02,
        scrape_timeout_s=0.5,
        engines_stale_s=2.0,
    )
    running = start_server(create_app(settings, registry=registry, monotonic=clock))
    try:
        service = Service(running.url, registry, clock)
        chunked = {**NAMES_ONLY, "chunk_size": 512}  # the rate stretches TPOT by chunks of this size
        answer = wait_for(
            service,
            lambda a: a["input_sources"]["colloc_prefill_tokens_per_s"]["source"] == "scrape",
            chunked,
        )
        assert engine.hits >= 2
        for field in ("colloc_prefill_tokens_per_s", "decode_prefill_tokens_per_s"):
            assert answer["input_sources"][field]["endpoint"] == "m0"
        # The decision is the one the caller gets sending the rate (and the scraped loads) itself.
        sent = {
            **chunked,
            "system_load": VLLM_RUNNING,
            "decode_batch_size": VLLM_RUNNING,
            "colloc_context_tokens": VLLM_KV_TOKENS,
            "decode_context_tokens": VLLM_KV_TOKENS,
        }
        with_rate = service.post(
            "/route", {**sent, "colloc_prefill_tokens_per_s": rate, "decode_prefill_tokens_per_s": rate}
        ).json()
        idle = {"colloc_prefill_tokens_per_s": 0.0, "decode_prefill_tokens_per_s": 0.0}
        without = service.post("/route", {**sent, **idle}).json()
        assert with_rate["breakdown"] == answer["breakdown"]
        assert with_rate["input_sources"]["colloc_prefill_tokens_per_s"] == {"source": "caller"}
        # The rate changed the prediction: a stretched TPOT on both paths.
        assert without["breakdown"]["tpot_collocated_ms"] < answer["breakdown"]["tpot_collocated_ms"]
        assert without["breakdown"]["tpot_disaggregated_ms"] < answer["breakdown"]["tpot_disaggregated_ms"]
    finally:
        running.stop()
        engine.stop()
