"""The blocking client against the real service on loopback, and against servers that fail."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.settings import Settings
from pdroute_client import BreakerConfig, Client, InvalidArgument, RouteQuery, StaticFallback
from tests.app.conftest import Running
from tests.factories import TEST_QUEUE_AWARE, write_params
from tests.pdroute_client.conftest import Slow, fixed, nowhere

QUERIES = [
    RouteQuery(prompt_len=4096, system_load=24),
    RouteQuery(prompt_len=64, system_load=0, predicted_output_len=20),
    RouteQuery(
        prompt_len=8192,
        system_load=8,
        prefill_queue_requests=30,
        prefill_queue_tokens=120_000,
        prefill_pool_gpus=2,
        ttft_slo_ms=2000.0,
    ),
    RouteQuery(prompt_len=1024, system_load=64, cached_prompt_tokens=512, tpot_slo_ms=30.0, request_id="r-1"),
]
# The remote and local answers must agree on everything but the tier and its explanation.
SAME = ("decision", "reason", "model", "params_id", "t_collocated_ms", "t_disaggregated_ms", "meets_slo")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def same(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    diff = {k: (getattr(a, k), getattr(b, k)) for k in SAME if getattr(a, k) != getattr(b, k)}
    if tuple(a.assumed) != tuple(b.assumed) or dict(a.breakdown) != dict(b.breakdown):
        diff["terms"] = (a.breakdown, b.breakdown)
    return diff


def test_remote_tier_answers_as_the_service(service: Running) -> None:
    with Client(service.url, deadline_s=2.0) as client, httpx.Client(base_url=service.url) as http:
        for q in QUERIES:
            answer = client.route(q)
            direct = http.post("/route", json=q.body()).json()
            assert (answer.tier, answer.why, answer.remote_cause) == ("remote", "remote", None)
            assert answer.decision == direct["decision"] and answer.reason == direct["reason"]
            assert answer.t_collocated_ms == direct["t_collocated_ms"]
            assert answer.request_id == q.request_id
        batch = client.route_batch([*QUERIES, {"prompt_len": 10, "system_load": 1}])
        assert [a.tier for a in batch] == ["remote"] * 5
        assert [a.decision for a in batch[:4]] == [client.route(q).decision for q in QUERIES]


def test_service_killed_mid_run_answers_locally_as_the_service_did(service: Running) -> None:
    with Client(service.url, deadline_s=2.0) as client:
        assert client.wait_for_params(10)
        remote = [client.route(q) for q in QUERIES]
        assert {a.tier for a in remote} == {"remote"}
        service.stop()
        for q, before in zip(QUERIES, remote, strict=True):
            started = time.perf_counter()
            answer = client.route(q)
            assert time.perf_counter() - started < 1.0  # refused at once, never the slow path
            assert (answer.tier, answer.why) == ("local", "local: service unreachable")
            assert same(answer, before) == {}
        batch = client.route_batch(QUERIES)
        assert all(a.tier == "local" for a in batch)
        assert [same(a, b) for a, b in zip(batch, remote, strict=True)] == [{}] * len(QUERIES)


def test_slow_server_the_deadline_holds_and_the_local_tier_answers(
    serve: Callable[..., Running], queue_aware_params_file: Path
) -> None:
    app = create_app(
        Settings(params_path=queue_aware_params_file, watch_params=False), registry=CollectorRegistry()
    )
    slow = serve(Slow(app, delay_s=5.0))
    with Client(slow.url, deadline_s=0.05) as client:
        assert client.wait_for_params(10)  # /params itself is not slow
        started = time.perf_counter()
        answer = client.route(QUERIES[0])
        elapsed = time.perf_counter() - started
        assert (answer.tier, answer.why) == ("local", "local: service timeout")
        assert elapsed < 1.0  # well above the deadline, far below the server's 5 s
        started = time.perf_counter()
        batch = client.route_batch(QUERIES, deadline_s=0.05)
        assert time.perf_counter() - started < 1.0
        assert {a.why for a in batch} == {"local: service timeout"}


def _refreshes(client: Client, result: str) -> float:
    value = client.metrics_registry.get_sample_value(
        "pdroute_client_params_refresh_total", {"result": result}
    )
    return value or 0.0


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _reload(service: Running, path: Path, **overrides: Any) -> str:
    write_params(path, schema_version=2, queue_aware=TEST_QUEUE_AWARE, **overrides)
    reloaded = httpx.post(f"{service.url}/admin/reload", headers={"Authorization": "Bearer t0ken"})
    assert reloaded.json()["status"] == "reloaded"
    new_id: str = reloaded.json()["params_id"]
    return new_id


def test_params_changed_on_the_server_the_client_follows(
    start_service: Callable[..., Running], tmp_path: Path
) -> None:
    path = write_params(tmp_path / "p.json", schema_version=2, queue_aware=TEST_QUEUE_AWARE)
    service = start_service(params_path=path, admin_token="t0ken")
    with Client(service.url, deadline_s=2.0, refresh_interval_s=0.3) as client:
        assert client.wait_for_params(10)
        first = client.params
        assert first is not None and first.etag is not None
        # Unchanged params: the refreshes are answered 304 and the cache is kept.
        assert _wait_until(lambda: _refreshes(client, "not_modified") >= 2)
        assert client.params is first and _refreshes(client, "updated") == 1
        new_id = _reload(service, path, alpha=0.07)
        assert _wait_until(lambda: client.params is not None and client.params.params_id == new_id)
        assert client.params is not None and client.params.etag != first.etag
        assert _refreshes(client, "updated") == 2
        remote = client.route(QUERIES[0])
        assert remote.params_id == new_id
        assert same(client.params.decide(QUERIES[0], "local: test"), remote) == {}


def test_an_answer_naming_new_params_triggers_a_refresh(
    start_service: Callable[..., Running], tmp_path: Path
) -> None:
    path = write_params(tmp_path / "p.json", schema_version=2, queue_aware=TEST_QUEUE_AWARE)
    service = start_service(params_path=path, admin_token="t0ken")
    with Client(service.url, deadline_s=2.0, refresh_interval_s=3600) as client:
        assert client.wait_for_params(10)
        new_id = _reload(service, path, beta=25.0)
        assert client.route(QUERIES[0]).params_id == new_id  # the service moved on
        # Not the hour-long interval: the answer woke the refresh thread.
        assert _wait_until(lambda: client.params is not None and client.params.params_id == new_id)


class Switch:
    """Wraps an ASGI app: while ``broken``, ``/route`` answers 500."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.broken = False
        self.failing = fixed(500, b'{"error": "boom"}')

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.broken and scope["type"] == "http" and scope["path"] == "/route":
            await self.failing(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def test_breaker_opens_then_a_half_open_probe_closes_it(
    serve: Callable[..., Running], queue_aware_params_file: Path
) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    switch = Switch(create_app(Settings(params_path=queue_aware_params_file, watch_params=False)))
    running = serve(switch)
    config = BreakerConfig(consecutive_failures=3, cool_down_s=5.0)
    with Client(running.url, deadline_s=2.0, breaker=config, clock=clock, registry=registry) as client:
        assert client.wait_for_params(10)

        def state(name: str) -> float | None:
            return registry.get_sample_value("pdroute_client_breaker_state", {"state": name})

        switch.broken = True
        assert [client.route(QUERIES[0]).why for _ in range(3)] == ["local: service error"] * 3
        assert str(client.breaker_state) == "open" and state("open") == 1 and state("closed") == 0
        switch.broken = False  # the service is back, but the breaker is open: no call goes out
        assert client.route(QUERIES[0]).why == "local: breaker open"
        clock.now += 4.9
        assert client.route(QUERIES[0]).why == "local: breaker open"
        clock.now += 0.1
        assert str(client.breaker_state) == "half_open"
        switch.broken = True  # a failed probe opens it again for another cool-down
        assert client.route(QUERIES[0]).why == "local: service error"
        assert str(client.breaker_state) == "open"
        clock.now += 5.0
        switch.broken = False
        assert client.route(QUERIES[0]).tier == "remote"  # the probe
        assert str(client.breaker_state) == "closed" and state("closed") == 1
        assert client.route(QUERIES[0]).tier == "remote"
        transitions = {
            s: registry.get_sample_value("pdroute_client_breaker_transitions_total", {"state": s})
            for s in ("open", "half_open", "closed")
        }
        assert transitions == {"open": 2, "half_open": 2, "closed": 1}


def test_server_failures_never_raise(serve: Callable[..., Running]) -> None:
    fallback = StaticFallback(disaggregate_from_prompt_len=4096)
    for status, body, cause in (
        (200, b"not json", "bad answer"),
        (200, b'{"decision": "maybe"}', "bad answer"),
        (200, b"[1, 2]", "bad answer"),
        (500, b'{"error": "boom"}', "service error"),
        (503, b"", "service error"),
    ):
        running = serve(fixed(status, body))
        with Client(running.url, deadline_s=2.0, fallback=fallback) as client:
            answer = client.route(QUERIES[0])
            assert (answer.tier, answer.why, answer.remote_cause) == (
                "static",
                "static: no params yet",
                cause,
            )
            assert (answer.decision, answer.reason) == ("disaggregated", "static_long_prompt")
            assert client.route(QUERIES[1]).decision == "collocated"
            assert all(a.tier == "static" for a in client.route_batch(QUERIES))


def test_nothing_listening_static_then_no_raise() -> None:
    with Client(nowhere(), deadline_s=0.5) as client:
        answer = client.route(QUERIES[0])
        assert (answer.tier, answer.decision, answer.remote_cause) == (
            "static",
            "collocated",
            "service unreachable",
        )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"prompt_len": 0, "system_load": 1}, "prompt_len"),
        ({"prompt_len": 10, "system_load": 1.5}, "system_load"),
        ({"prompt_len": 10, "system_load": True}, "system_load"),
        ({"prompt_len": 10}, "system_load"),
        ({"prompt_len": 10, "system_load": 1, "promt_len": 3}, "promt_len"),
        ({"prompt_len": 10, "system_load": 1, "cached_prompt_tokens": 11}, "cached_prompt_tokens"),
        (
            {"prompt_len": 10, "system_load": 1, "colloc_cached_prompt_tokens": 11},
            "colloc_cached_prompt_tokens",
        ),
        (
            {"prompt_len": 10, "system_load": 1, "prefill_cached_prompt_tokens": 11},
            "prefill_cached_prompt_tokens",
        ),
        ({"prompt_len": 10, "system_load": 1, "ttft_slo_ms": 0}, "ttft_slo_ms"),
        ({"prompt_len": 10, "system_load": 1, "request_id": "x" * 257}, "request_id"),
    ],
)
def test_invalid_arguments_raise_locally_naming_the_field(query: dict[str, Any], field: str) -> None:
    # Nothing listens: the error must come before any I/O.
    with Client(nowhere(), start=False) as client:
        with pytest.raises(InvalidArgument, match=f"^{field}: ") as raised:
            client.route(query)
        assert raised.value.field == field
        with pytest.raises(InvalidArgument, match=rf"^requests\[1\]\.{field}: "):
            client.route_batch([QUERIES[0], query])
        with pytest.raises(InvalidArgument, match=r"^deadline_s: "):
            client.route(QUERIES[0], deadline_s=0)


def test_metrics_on_the_registry_passed_in(service: Running) -> None:
    registry = CollectorRegistry()
    with Client(service.url, deadline_s=2.0, registry=registry) as client:
        client.route(QUERIES[0])
        client.route_batch(QUERIES[:2])
    exposed = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(exposed)}
    answers = {
        (s.labels["tier"], s.labels["cause"]): s.value
        for s in families["pdroute_client_answers"].samples
        if s.name.endswith("_total") and s.value
    }
    assert answers == {("remote", "ok"): 3}
    states = {s.labels["state"]: s.value for s in families["pdroute_client_breaker_state"].samples}
    assert states == {"closed": 1, "open": 0, "half_open": 0}
    timed = {
        s.labels["tier"]: s.value
        for s in families["pdroute_client_answer_seconds"].samples
        if s.name.endswith("_count")
    }
    assert timed["remote"] == 2  # two calls (one of them a batch of two)
    info = [s.labels for s in families["pdroute_client_params_info"].samples]
    assert info == [{"params_id": client.params.params_id if client.params else "", "model": "queue-aware"}]
    # Nothing went to the process-wide default registry.
    assert (
        REGISTRY.get_sample_value("pdroute_client_answers_total", {"tier": "remote", "cause": "ok"}) is None
    )


def test_a_recalibrated_service_and_the_local_tier_decide_alike(
    start_service: Callable[..., Running], queue_aware_params_file: Path
) -> None:
    service = start_service(
        params_path=queue_aware_params_file,
        calibration_enabled=True,
        calibration_min_observations=1,
        calibration_refresh_every=1,
    )
    with httpx.Client(base_url=service.url) as http:
        for i in range(40):  # every latency observed at 1.6x its prediction
            body = {"prompt_len": 2048, "system_load": 8, "request_id": f"c-{i}"}
            answer = http.post("/route", json=body).json()
            path = answer["decision"]
            terms = answer["breakdown"]
            feedback = {
                "request_id": f"c-{i}",
                "ttft_ms": 1.6 * terms[f"ttft_{path}_ms"],
                "tpot_ms": 1.6 * terms[f"tpot_{path}_ms"],
            }
            assert http.post("/feedback", json=feedback).status_code == 202
        corrections = http.get("/params").json()["calibration"]["corrections"]
    assert any(value != 1.0 for value in corrections.values())  # the service did recalibrate
    with Client(service.url, deadline_s=2.0) as client:
        assert client.wait_for_params(10)
        remote = [client.route(q) for q in QUERIES]
        assert {a.tier for a in remote} == {"remote"}
        service.stop()
        local = [client.route(q) for q in QUERIES]
    assert {a.tier for a in local} == {"local"}
    assert [same(a, b) for a, b in zip(local, remote, strict=True)] == [{}] * len(QUERIES)
