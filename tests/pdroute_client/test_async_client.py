"""The asyncio client against the real service on loopback: the same tiers as the blocking one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from app.main import create_app
from app.settings import Settings
from pdroute_client import AsyncClient, InvalidArgument
from tests.app.conftest import Running
from tests.pdroute_client.conftest import Slow, nowhere
from tests.pdroute_client.test_sync_client import QUERIES, same


def test_remote_then_killed_then_local(service: Running) -> None:
    async def scenario() -> None:
        async with AsyncClient(service.url, deadline_s=2.0) as client:
            assert await client.wait_for_params(10)
            remote = [await client.route(q) for q in QUERIES]
            assert {a.tier for a in remote} == {"remote"}
            batch = await client.route_batch(QUERIES)
            assert [a.decision for a in batch] == [a.decision for a in remote]
            service.stop()
            for q, before in zip(QUERIES, remote, strict=True):
                answer = await client.route(q)
                assert (answer.tier, answer.why) == ("local", "local: service unreachable")
                assert same(answer, before) == {}
            assert all(a.tier == "local" for a in await client.route_batch(QUERIES))

    asyncio.run(scenario())


def test_slow_server_the_whole_call_is_bounded(
    serve: Callable[..., Running], queue_aware_params_file: Path
) -> None:
    app = create_app(
        Settings(params_path=queue_aware_params_file, watch_params=False), registry=CollectorRegistry()
    )
    slow = serve(Slow(app, delay_s=5.0))

    async def scenario() -> None:
        async with AsyncClient(slow.url, deadline_s=0.05) as client:
            assert await client.wait_for_params(10)
            started = time.perf_counter()
            answer = await client.route(QUERIES[0])
            assert time.perf_counter() - started < 1.0  # not the server's 5 s
            assert (answer.tier, answer.why) == ("local", "local: service timeout")
            # Concurrent calls each keep their own deadline.
            started = time.perf_counter()
            answers = await asyncio.gather(*(client.route(q) for q in QUERIES))
            assert time.perf_counter() - started < 1.0
            assert {a.tier for a in answers} == {"local"}

    asyncio.run(scenario())


def test_no_service_static_and_invalid_arguments_raise() -> None:
    async def scenario() -> None:
        async with AsyncClient(nowhere(), deadline_s=0.5) as client:
            answer = await client.route(QUERIES[0])
            assert (answer.tier, answer.why) == ("static", "static: no params yet")
            with pytest.raises(InvalidArgument, match=r"^chunk_size: "):
                await client.route({"prompt_len": 5, "system_load": 0, "chunk_size": 0})

    asyncio.run(scenario())
