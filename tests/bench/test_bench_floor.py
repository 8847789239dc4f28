"""``bench.bench_floor`` and the in-process ASGI timing of ``bench.bench_route``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import MutableMapping
from typing import Any

import pytest

from bench import spin_app
from bench.bare_app import BODY
from bench.bench_floor import crossing
from bench.bench_route import DESIGN_BODY, asgi_us


def test_crossing_interpolates_between_the_measured_spins() -> None:
    points = [(0.0, 1.0), (5.0, 0.8), (10.0, 0.6), (20.0, 0.4)]
    assert crossing(points, 0.7) == pytest.approx(7.5)
    assert crossing(points, 0.6) == pytest.approx(10.0)
    assert crossing(points, 0.5) == pytest.approx(15.0)
    assert crossing(points, 0.3) is None  # never measured that low


def test_asgi_us_times_the_bare_app_per_request() -> None:
    per_request = asgi_us(spin_app.app, json.dumps(DESIGN_BODY).encode(), n=200)
    assert per_request > 0


def test_the_spin_app_answers_the_bare_body_after_its_busy_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spin_app, "SPIN_S", 0.02)
    ticks: list[float] = []

    def clock() -> float:  # a clock that moves 1 ms per reading
        ticks.append(len(ticks) * 1e-3)
        return ticks[-1]

    monkeypatch.setattr(time, "perf_counter", clock)
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(spin_app.app({"type": "http", "method": "POST", "path": "/route"}, receive, send))
    assert len(ticks) == 21  # the deadline's reading, then one a millisecond until 20 ms have passed
    assert sent[0]["status"] == 200 and sent[1]["body"] == BODY
