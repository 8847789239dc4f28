"""The blocking client's total deadline against servers that misbehave at each phase.

Each server wraps the real service (so ``/params`` answers and the local tier has params) and
misbehaves on ``/route``: it trickles its answer a byte at a time, never answers, or reads the
request slowly. Each delay is far longer than the bound asserted (0.5 s for a 50 ms deadline),
and each per-phase step is shorter than the deadline, so only a total deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.main import create_app
from app.settings import Settings
from pdroute_client import BreakerConfig, Client
from pdroute_client.deadline_http import ClientClosed, DeadlineHttp
from tests.app.conftest import Running
from tests.pdroute_client.test_sync_client import QUERIES

DEADLINE_S = 0.05
# Generous for a shared 2-core machine (0.53 s was seen with six threads under load) and still
# a quarter of the trickled answer's 8 s: a call that waited for the server would exceed it.
BOUND_S = 2.0
STEP_S = 0.02  # each byte, each read: under the deadline, so per-phase timeouts never fire


async def _drain(receive: Receive, pause_s: float = 0.0) -> None:
    """Read the request body to its end, pausing ``pause_s`` before each message."""
    while True:
        await asyncio.sleep(pause_s)
        message: Message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


class Misbehaving:
    """The real service, except ``/route`` and ``/route/batch``, which misbehave as ``mode`` says:

    - ``trickle``: answers 200 with a 400-byte body, one byte every ``STEP_S`` (8 s in all);
    - ``silent``: reads the request, then never answers (until the server stops);
    - ``slow_reader``: reads the request one message every ``STEP_S``, then trickles the answer.
    """

    def __init__(self, app: ASGIApp, mode: str) -> None:
        self.app = app
        self.mode = mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/route"):
            await self.app(scope, receive, send)
            return
        await _drain(receive, STEP_S if self.mode == "slow_reader" else 0.0)
        gone = asyncio.Event()  # the client hung up: stop misbehaving, so the server stops at once
        watcher = asyncio.create_task(self._watch(receive, gone))
        try:
            if self.mode == "silent":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone.wait(), 30)
                return
            size = 400
            headers = [(b"content-type", b"application/json"), (b"content-length", str(size).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for _ in range(size):
                if gone.is_set():
                    return
                await send({"type": "http.response.body", "body": b" ", "more_body": True})
                await asyncio.sleep(STEP_S)
            await send({"type": "http.response.body", "body": b""})
        finally:
            watcher.cancel()

    @staticmethod
    async def _watch(receive: Receive, gone: asyncio.Event) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()


@pytest.fixture
def misbehaving(
    serve: Callable[[ASGIApp], Running], queue_aware_params_file: Path
) -> Callable[[str], Running]:
    def _start(mode: str) -> Running:
        app = create_app(
            Settings(params_path=queue_aware_params_file, watch_params=False), registry=CollectorRegistry()
        )
        return serve(Misbehaving(app, mode))

    return _start


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


@pytest.mark.parametrize("mode", ["trickle", "silent", "slow_reader"])
def test_a_misbehaving_server_costs_one_deadline_and_the_local_tier_answers(
    misbehaving: Callable[[str], Running], mode: str
) -> None:
    running = misbehaving(mode)
    registry = CollectorRegistry()
    with Client(running.url, deadline_s=DEADLINE_S, registry=registry) as client:
        assert client.wait_for_params(10)
        for _ in range(3):  # a fresh connection each time: the timed-out ones are dropped
            started = time.perf_counter()
            answer = client.route(QUERIES[0])
            assert time.perf_counter() - started < BOUND_S
            assert (answer.tier, answer.why, answer.remote_cause) == (
                "local",
                "local: service timeout",
                "service timeout",
            )
        started = time.perf_counter()
        batch = client.route_batch(QUERIES, deadline_s=DEADLINE_S)
        assert time.perf_counter() - started < BOUND_S
        assert {a.why for a in batch} == {"local: service timeout"}
        timeouts = registry.get_sample_value(
            "pdroute_client_answers_total", {"tier": "local", "cause": "service timeout"}
        )
        assert timeouts == 3 + len(QUERIES)
        # The workers dropped their requests too: closing does not wait for the servers' seconds.
        assert _timed(client.close) < 2 * BOUND_S


def test_calls_from_many_threads_each_return_within_the_bound(
    misbehaving: Callable[[str], Running],
) -> None:
    running = misbehaving("trickle")
    results: list[tuple[float, str]] = []
    lock = threading.Lock()
    never_opens = BreakerConfig(consecutive_failures=1000)  # every call goes to the server
    with Client(running.url, deadline_s=DEADLINE_S, breaker=never_opens) as client:
        assert client.wait_for_params(10)

        def gateway_thread() -> None:
            for _ in range(3):
                started = time.perf_counter()
                why = client.route(QUERIES[1]).why
                with lock:
                    results.append((time.perf_counter() - started, why))

        threads = [threading.Thread(target=gateway_thread) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    assert len(results) == 18
    assert {why for _, why in results} == {"local: service timeout"}
    assert max(elapsed for elapsed, _ in results) < BOUND_S


def test_many_threads_share_one_healthy_client_and_no_thread_outlives_it(service: Running) -> None:
    answers: list[str] = []
    lock = threading.Lock()
    with Client(service.url, deadline_s=2.0, max_connections=4) as client:

        def gateway_thread() -> None:
            for q in QUERIES * 5:
                tier = client.route(q).tier
                with lock:
                    answers.append(tier)

        threads = [threading.Thread(target=gateway_thread) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        workers = [t for t in threading.enumerate() if t.name.startswith("pdroute-http")]
        assert 1 <= len(workers) <= 4  # a fixed pool, not a thread per call
    assert answers == ["remote"] * (8 * 5 * len(QUERIES))
    assert not [t for t in threading.enumerate() if t.name.startswith(("pdroute-http", "pdroute-params"))]


def test_calls_after_close_answer_locally_and_close_is_idempotent(service: Running) -> None:
    client = Client(service.url, deadline_s=2.0)
    assert client.wait_for_params(10)
    client.close()
    answer = client.route(QUERIES[0])
    assert (answer.tier, answer.remote_cause) == ("local", "service error")
    client.close()


def test_a_request_body_the_server_reads_slowly_is_abandoned_at_the_deadline(
    misbehaving: Callable[[str], Running],
) -> None:
    # 32 MB: more than the loopback buffers hold, so the write itself waits on the slow reader.
    running = misbehaving("slow_reader")
    http = DeadlineHttp(running.url, timeout_s=DEADLINE_S, max_connections=2)
    try:
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            http.post("/route", json={"pad": "x" * (32 << 20)}, deadline_s=DEADLINE_S)
        assert time.perf_counter() - started < BOUND_S
    finally:
        http.close()
    with pytest.raises(ClientClosed):
        http.post("/route", json={}, deadline_s=DEADLINE_S)
