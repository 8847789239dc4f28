"""Auto-fill end to end: /route on a real uvicorn server takes its load inputs from a real engine's /metrics.

While two requests stream on the engine, a /route request naming it as its decode target (in
pool ``mixed``: it is the collocation GPU too) gets ``system_load`` and ``decode_batch_size``
from the scrape, and ``input_sources`` names the engine; with the engine stopped, the same
request is answered with those inputs assumed.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from localfleet import Engine, Fleet
from profiling.sources.engine_api import fresh_prompt, metric_sum, read_metrics, stream_completion
from tests.app.conftest import start_server
from tests.factories import write_params
from tests.real_engines.conftest import FleetKeeper

ROUTE = {"prompt_len": 1024, "predicted_output_len": 32, "decode_target": "c0"}
STALE_S = 1.0


def _route_while_streaming(service_url: str, engine: Engine, num_streams: int) -> dict[str, Any]:
    async def scenario(client: httpx.AsyncClient) -> dict[str, Any]:
        rng = random.Random(11)
        tasks = [
            asyncio.create_task(stream_completion(client, engine.url, "tiny", fresh_prompt(rng, 64), 2000))
            for _ in range(num_streams)
        ]
        try:
            for _ in range(400):  # until the engine reports them running and the service has scraped it
                running = metric_sum(await read_metrics(client, engine.url), "vllm:num_requests_running")
                if running == num_streams:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.6)  # two scrape rounds
            resp = await client.post(f"{service_url}/route", json=ROUTE)
            resp.raise_for_status()
            answer: dict[str, Any] = resp.json()
            return answer
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def main() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=60.0) as client:
            return await scenario(client)

    return asyncio.run(main())


@pytest.mark.stops_engine
def test_route_fills_load_from_the_live_engine_then_assumes_it_once_the_engine_is_stopped(
    fleets: FleetKeeper, tiny_engine: Engine, tmp_path: Path
) -> None:
    fleet: Fleet = fleets.get("tiny")
    settings = Settings(
        params_path=write_params(tmp_path / "params.json"),
        watch_params=False,
        engines_file=fleet.engines_file(tmp_path / "engines.json"),
        scrape_interval_s=0.2,
        engines_stale_s=STALE_S,
    )
    server = start_server(create_app(settings))
    try:
        answer = _route_while_streaming(server.url, tiny_engine, num_streams=2)
        sources = answer["input_sources"]
        for name in ("system_load", "decode_batch_size"):
            assert sources[name]["source"] == "scrape"
            assert sources[name]["endpoint"] == "c0"
            assert sources[name]["age_ms"] <= STALE_S * 1e3
            assert name not in answer["assumed"]
        assert sources["decode_context_tokens"]["source"] == "scrape"
        with httpx.Client(base_url=server.url, timeout=10.0) as client:
            filled_metrics = client.get("/metrics").text

        fleets.stop("tiny")  # the engine goes away: its readings age past STALE_S
        time.sleep(STALE_S + 0.5)
        with httpx.Client(base_url=server.url, timeout=10.0) as client:
            resp = client.post("/route", json=ROUTE)
            after_metrics = client.get("/metrics").text
        assert resp.status_code == 200
        stopped = resp.json()
        for name in ("system_load", "decode_batch_size"):
            assert stopped["input_sources"][name] == {"source": "assumed"}
        assert "pdroute_engine_scrape_errors" in after_metrics
        assert 'pdroute_engine_fresh_endpoints{pool="mixed"} 1.0' in filled_metrics
        assert 'pdroute_engine_fresh_endpoints{pool="mixed"} 0.0' in after_metrics
    finally:
        server.stop()
