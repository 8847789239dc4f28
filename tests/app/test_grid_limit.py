"""The cap on concurrent ``POST /plan/grid`` computations (app/grid_limit.py), over real HTTP.

Computations are held open by wrapping the route's grid solver so that it waits, inside the
handler and its slot, until the test releases it: the cap is then met deterministically.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

import app.routes.plan
from app.settings import Settings
from solver.plan import PlanGrid, solve_grid
from tests.app.conftest import LiveServer
from tests.app.metrics.test_service import scrape, value

GRID = {"curves": "bloom-176b-8xh100", "machines": 64, "prompt_lens": [1024, 4096], "output_lens": [256]}


class HeldGrids:
    """``solve_grid`` that first signals ``entered`` and waits for ``release``."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> PlanGrid:
        self.entered.release()
        if not self.release.wait(timeout=30):
            raise RuntimeError("the test never released the held grid")
        return solve_grid(*args, **kwargs)


def _start_grids(server: LiveServer, count: int, out: list[httpx.Response]) -> list[threading.Thread]:
    def post() -> None:
        with httpx.Client(base_url=server.url, timeout=40.0) as client:
            out.append(client.post("/plan/grid", json=GRID))

    threads = [threading.Thread(target=post) for _ in range(count)]
    for t in threads:
        t.start()
    return threads


def test_grids_beyond_the_cap_get_429_with_retry_after_and_are_counted(
    make_server: Callable[..., LiveServer], params_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldGrids()
    monkeypatch.setattr(app.routes.plan, "solve_grid", held)
    server = make_server(params_path=params_file, watch_params=False, max_concurrent_grids=2)
    answers: list[httpx.Response] = []
    threads = _start_grids(server, 2, answers)
    try:
        for _ in range(2):
            assert held.entered.acquire(timeout=20), "a held grid never started"
        with server.client() as client:
            assert value(scrape(client), "pdroute_plan_grids_in_progress") == 2
            refused = client.post("/plan/grid", json=GRID)
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.headers["content-type"] == "application/json"
            body = refused.json()
            assert "at most 2 at once" in body["error"] and "PDROUTE_MAX_CONCURRENT_GRIDS" in body["error"]
            # only grids are capped: a single plan is answered meanwhile
            single = {"curves": "bloom-176b-8xh100", "machines": 64, "prompt_len": 1024, "output_len": 256}
            assert client.post("/plan", json=single).status_code == 200
            metrics = scrape(client)
            assert value(metrics, "pdroute_plan_grids_rejected_total") == 1
            assert value(metrics, "pdroute_http_requests_total", handler="/plan/grid", code="429") == 1
    finally:
        held.release.set()
        for t in threads:
            t.join(timeout=40)
    assert [r.status_code for r in answers] == [200, 200]
    with server.client() as client:
        assert client.post("/plan/grid", json=GRID).status_code == 200  # the slots were given back
        metrics = scrape(client)
        assert value(metrics, "pdroute_plan_grids_in_progress") == 0
        assert value(metrics, "pdroute_plan_grids_rejected_total") == 1


def test_a_failed_grid_gives_its_slot_back(make_server: Callable[..., LiveServer], params_file: Path) -> None:
    server = make_server(params_path=params_file, watch_params=False, max_concurrent_grids=1)
    with server.client() as client:
        for _ in range(3):  # an infeasible grid (every prompt too long) is 422 and frees the slot
            r = client.post("/plan/grid", json={**GRID, "prompt_lens": [1_000_000]})
            assert r.status_code == 422, r.text
        assert client.post("/plan/grid", json=GRID).status_code == 200
        assert value(scrape(client), "pdroute_plan_grids_rejected_total") == 0


def test_the_cap_is_at_least_one() -> None:
    assert Settings().max_concurrent_grids == 2
    with pytest.raises(ValidationError, match="max_concurrent_grids"):
        Settings(max_concurrent_grids=0)
