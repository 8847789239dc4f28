"""The scraper against real HTTP servers on 127.0.0.1, with faults.

Readings are timed by an injected clock; the only real time is the per-target timeout, which
a server that sleeps past it exceeds (no durations are asserted).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from app.engines.metrics import ScrapeMetrics
from app.engines.scraper import EngineScraper, ScrapeSettings, session
from tests.app.engines.engine_server import EngineServer
from tests.app.engines.expositions import VLLM_RUNNING, sglang_text, vllm_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def servers() -> Iterator[dict[str, EngineServer]]:
    started = {
        "m0": EngineServer(vllm_text()),
        "p0": EngineServer(sglang_text()),
        "garbage": EngineServer("<html>502 Bad Gateway</html>"),
        "err500": EngineServer(vllm_text()),
        "slow": EngineServer(vllm_text()),
        "nan": EngineServer(vllm_text(running=(float("nan"), 1.0))),
        "negative": EngineServer(sglang_text(queue=-4.0)),
    }
    started["err500"].status = 503
    started["slow"].delay_s = 3.0
    yield started
    for server in started.values():
        server.stop()


def write_fleet(path: Path, servers: dict[str, EngineServer], mixed: tuple[str, ...]) -> Path:
    kinds = {"p0": "sglang", "negative": "sglang"}
    fleet = {
        "pools": {
            "prefill": [{"id": "p0", "url": servers["p0"].url, "kind": "sglang"}],
            "mixed": [{"id": i, "url": servers[i].url, "kind": kinds.get(i, "vllm")} for i in mixed],
        }
    }
    path.write_text(json.dumps(fleet))
    return path


ALL_MIXED = ("m0", "garbage", "err500", "slow", "nan", "negative")


def make(path: Path, clock: FakeClock, registry: CollectorRegistry) -> EngineScraper:
    # 1 s: far past a loopback answer even on a busy machine, and well short of "slow"'s 3 s.
    settings = ScrapeSettings(timeout_s=1.0, stale_s=2.0)
    return EngineScraper(path, settings, ScrapeMetrics(registry), clock)


def errors(registry: CollectorRegistry, target: str, kind: str, reason: str) -> float:
    labels = {"target": target, "kind": kind, "reason": reason}
    return registry.get_sample_value("pdroute_engine_scrape_errors_total", labels) or 0.0


async def one_round(scraper: EngineScraper) -> None:
    async with session(scraper.settings) as client:
        await scraper.scrape_round(client)


def test_faults_are_counted_and_good_endpoints_still_read(
    tmp_path: Path, servers: dict[str, EngineServer]
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    scraper = make(write_fleet(tmp_path / "e.json", servers, ALL_MIXED), clock, registry)
    asyncio.run(one_round(scraper))
    readings = scraper.snapshot.readings
    assert readings["m0"].sample.running == VLLM_RUNNING
    assert readings["m0"].taken_at == 100.0
    assert readings["p0"].sample.waiting == 4.0
    assert "garbage" not in readings and "err500" not in readings and "slow" not in readings
    assert errors(registry, "garbage", "vllm", "parse") == 1
    assert errors(registry, "err500", "vllm", "http_status") == 1
    assert errors(registry, "slow", "vllm", "timeout") == 1
    # NaN running: that signal is refused (counted), the rest of the reading is kept.
    assert readings["nan"].sample.running is None
    assert readings["nan"].sample.waiting == 3.0
    assert errors(registry, "nan", "vllm", "bad_value") == 1
    assert readings["negative"].sample.waiting is None  # a negative queue is refused
    assert readings["negative"].sample.running == 9.0
    assert errors(registry, "negative", "sglang", "bad_value") == 1
    assert registry.get_sample_value("pdroute_engine_fresh_endpoints", {"pool": "mixed"}) == 3
    assert registry.get_sample_value("pdroute_engine_data_age_seconds", {"pool": "prefill"}) == 0.0
    assert registry.get_sample_value("pdroute_engine_data_age_seconds", {"pool": "decode"}) == float("inf")
    count = registry.get_sample_value("pdroute_engine_scrape_duration_seconds_count", {"kind": "vllm"})
    assert count == len(ALL_MIXED) - 1  # the negative one is sglang


def test_a_target_that_disappears_keeps_its_old_reading_until_it_returns(
    tmp_path: Path, servers: dict[str, EngineServer]
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    scraper = make(write_fleet(tmp_path / "e.json", servers, ("m0",)), clock, registry)
    asyncio.run(one_round(scraper))
    servers["m0"].stop()
    clock.now = 103.0
    asyncio.run(one_round(scraper))
    assert errors(registry, "m0", "vllm", "connect") == 1
    assert scraper.snapshot.readings["m0"].taken_at == 100.0  # kept, now 3 s old: stale
    assert registry.get_sample_value("pdroute_engine_fresh_endpoints", {"pool": "mixed"}) == 0
    assert registry.get_sample_value("pdroute_engine_data_age_seconds", {"pool": "mixed"}) == 3.0
    servers["m0"].text = vllm_text(running=(1.0, 1.0))
    servers["m0"].start()  # the same port again
    clock.now = 104.0
    asyncio.run(one_round(scraper))
    reading = scraper.snapshot.readings["m0"]
    assert (reading.taken_at, reading.sample.running) == (104.0, 2.0)


def test_reload_swaps_a_good_file_and_keeps_the_fleet_on_a_bad_one(
    tmp_path: Path, servers: dict[str, EngineServer]
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    path = write_fleet(tmp_path / "e.json", servers, ("m0", "garbage"))
    scraper = make(path, clock, registry)
    asyncio.run(one_round(scraper))
    write_fleet(path, servers, ("m0",))
    fleet = scraper.reload()
    assert fleet is not None and set(fleet.endpoints) == {"p0", "m0"}
    assert set(scraper.snapshot.readings) == {"p0", "m0"}  # unchanged endpoints keep their readings
    path.write_text('{"pools": {"mixed": [{"id": "x", "url": "nope", "kind": "vllm"}]}}')
    assert scraper.reload() is None
    assert scraper.fleet is fleet
    assert scraper.last_error is not None and "pools.mixed.0.url" in scraper.last_error
    assert registry.get_sample_value("pdroute_engines_reloads_total", {"outcome": "failure"}) == 1
    assert registry.get_sample_value("pdroute_engines_reloads_total", {"outcome": "success"}) == 1


def test_run_scrapes_until_cancelled_and_picks_up_a_changed_file(
    tmp_path: Path, servers: dict[str, EngineServer]
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    path = write_fleet(tmp_path / "e.json", servers, ("m0",))
    scraper = EngineScraper(
        path,
        ScrapeSettings(interval_s=0.01, timeout_s=0.5, watch_interval_s=0.0),
        ScrapeMetrics(registry),
        clock,
    )

    async def scenario() -> None:
        task = asyncio.create_task(scraper.run())
        try:
            for _ in range(500):  # bounded polling, no timing asserted
                if "m0" in scraper.snapshot.readings:
                    break
                await asyncio.sleep(0.01)
            assert scraper.snapshot.readings["m0"].sample.running == VLLM_RUNNING
            write_fleet(path, servers, ("m0", "nan"))
            for _ in range(500):
                if "nan" in scraper.snapshot.readings:
                    break
                await asyncio.sleep(0.01)
            assert "nan" in scraper.fleet.endpoints
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_each_stored_reading_carries_the_prefill_rate_since_the_one_it_replaces(
    tmp_path: Path, servers: dict[str, EngineServer]
) -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    scraper = make(write_fleet(tmp_path / "e.json", servers, ("m0",)), clock, registry)
    servers["m0"].text = vllm_text(prompt_tokens=(1000.0, 0.0))
    asyncio.run(one_round(scraper))
    assert scraper.snapshot.readings["m0"].prefill_tokens_per_s is None  # the first reading
    servers["m0"].text = vllm_text(prompt_tokens=(1500.0, 250.0))  # both engines' series summed
    clock.now = 100.5
    asyncio.run(one_round(scraper))
    assert scraper.snapshot.readings["m0"].prefill_tokens_per_s == 750.0 / 0.5
    # SGLang's counter the same way (p0 serves a constant counter: an idle GPU).
    assert scraper.snapshot.readings["p0"].prefill_tokens_per_s == 0.0
    servers["m0"].text = vllm_text(prompt_tokens=(10.0, 0.0))  # the engine restarted
    clock.now = 101.0
    asyncio.run(one_round(scraper))
    assert scraper.snapshot.readings["m0"].prefill_tokens_per_s is None
