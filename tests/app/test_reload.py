"""Reloading params without a restart: admin endpoint, SIGHUP, file watch; bad files refused."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.app.conftest import LiveServer, ServeProcess
from tests.conftest import write_params

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _params_id(client: httpx.Client) -> str:
    pid: str = client.get("/params").json()["params_id"]
    return pid


def test_admin_reload_swaps_good_and_refuses_bad(
    make_server: Callable[..., LiveServer], tmp_path: Path
) -> None:
    path = write_params(tmp_path / "params.json")
    server = make_server(params_path=path, watch_params=False, admin_token=TOKEN)
    with server.client() as client:
        first = _params_id(client)
        before = client.post("/route", json={"prompt_len": 1000, "system_load": 4}).json()

        write_params(path, gamma=0.5)
        r = client.post("/admin/reload", headers=AUTH)
        assert r.status_code == 200
        assert r.json()["status"] == "reloaded" and r.json()["previous_params_id"] == first
        second = r.json()["params_id"]
        assert second != first and _params_id(client) == second
        after = client.post("/route", json={"prompt_len": 1000, "system_load": 4}).json()
        assert after["breakdown"]["interference_ms"] > before["breakdown"]["interference_ms"]

        path.write_text(json.dumps({"schema_version": 1, "alpha": 1.0}))
        bad = client.post("/admin/reload", headers=AUTH)
        assert bad.status_code == 422
        assert "beta: missing" in bad.json()["error"] and str(path) in bad.json()["error"]
        assert _params_id(client) == second  # the old params keep serving
        assert "beta: missing" in client.get("/params").json()["last_reload_error"]
        assert client.post("/route", json={"prompt_len": 1000, "system_load": 4}).json() == after

        unchanged = client.post("/admin/reload", headers=AUTH)  # file still bad
        assert unchanged.status_code == 422


def test_admin_auth(make_server: Callable[..., LiveServer], params_file: Path) -> None:
    off = make_server(params_path=params_file, watch_params=False)
    on = make_server(params_path=params_file, watch_params=False, admin_token=TOKEN)
    with off.client() as c:
        r = c.post("/admin/reload", headers=AUTH)
        assert r.status_code == 403 and "PDROUTE_ADMIN_TOKEN" in r.json()["error"]
    with on.client() as c:
        assert c.post("/admin/reload").status_code == 401
        assert c.post("/admin/reload", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/admin/reload", headers={"Authorization": TOKEN}).status_code == 401
        r = c.post("/admin/reload", headers=AUTH)
        assert r.status_code == 200 and r.json()["status"] == "unchanged"


def test_requests_in_flight_during_reloads_never_fail(
    make_server: Callable[..., LiveServer], tmp_path: Path
) -> None:
    path = write_params(tmp_path / "params.json")
    server = make_server(params_path=path, watch_params=False, admin_token=TOKEN)
    gammas = [0.01, 0.5]
    with server.client() as c:
        ids = set()
        for g in gammas:
            write_params(path, gamma=g)
            ids.add(c.post("/admin/reload", headers=AUTH).json()["params_id"])
    stop = threading.Event()
    failures: list[str] = []
    seen: list[tuple[str, float]] = []

    def hammer() -> None:
        with server.client() as c:
            while not stop.is_set():
                r = c.post("/route", json={"prompt_len": 1000, "system_load": 16})
                if r.status_code != 200:
                    failures.append(r.text)
                    continue
                body = r.json()
                seen.append((body["params_id"], body["breakdown"]["interference_ms"]))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    with server.client() as c:
        for i in range(30):
            if i % 5 == 4:
                path.write_text("{broken")
            else:
                write_params(path, gamma=gammas[i % 2])
            c.post("/admin/reload", headers=AUTH)
    stop.set()
    for t in threads:
        t.join()
    assert not failures
    assert len(seen) > 30
    # Every answer comes wholly from one snapshot: its interference matches its params_id.
    by_id: dict[str, set[float]] = {}
    for pid, interference in seen:
        by_id.setdefault(pid, set()).add(interference)
    assert set(by_id) <= ids
    assert all(len(v) == 1 for v in by_id.values())


def test_file_watch_follows_a_configmap_symlink_swap(
    make_server: Callable[..., LiveServer], tmp_path: Path
) -> None:
    # Lay the volume out as the kubelet does: params.json -> ..data/params.json, ..data -> ..v1
    v1 = tmp_path / "..v1"
    v1.mkdir()
    write_params(v1 / "params.json")
    (tmp_path / "..data").symlink_to("..v1")
    (tmp_path / "params.json").symlink_to("..data/params.json")
    server = make_server(params_path=tmp_path / "params.json", watch_params=True, watch_interval_s=0.05)

    def swap(name: str, writer: Callable[[Path], Any]) -> None:
        new = tmp_path / name
        new.mkdir()
        writer(new / "params.json")
        tmp_link = tmp_path / "..data_tmp"
        tmp_link.symlink_to(name)
        os.replace(tmp_link, tmp_path / "..data")  # atomic rename, as the kubelet does

    def wait_for(predicate: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.05)
        return False

    with server.client() as c:
        first = _params_id(c)
        swap("..v2", lambda p: write_params(p, beta=99.0))
        assert wait_for(lambda: _params_id(c) != first)
        second = _params_id(c)
        assert c.get("/params").json()["params"]["beta"] == 99.0

        swap("..v3", lambda p: p.write_text('{"schema_version": 1, "alpha": NaN}'))
        assert wait_for(lambda: c.get("/params").json()["last_reload_error"] is not None)
        assert _params_id(c) == second
        metrics = c.get("/metrics").text
    assert 'pdroute_params_reloads_total{outcome="success",trigger="watch"} 1.0' in metrics
    assert 'pdroute_params_reloads_total{outcome="failure",trigger="watch"} 1.0' in metrics


def test_sighup_reloads_in_a_real_process(serve_process: Callable[..., ServeProcess], tmp_path: Path) -> None:
    path = write_params(tmp_path / "params.json")
    proc = serve_process("--params", str(path), env={"PDROUTE_WATCH_PARAMS": "false"})
    proc.wait_ready()
    first = httpx.get(f"{proc.url}/params").json()["params_id"]

    def current() -> str:
        pid: str = httpx.get(f"{proc.url}/params").json()["params_id"]
        return pid

    def wait_change(old: str) -> str:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and current() == old:
            time.sleep(0.05)
        return current()

    write_params(path, alpha=0.07)
    proc.signal(signal.SIGHUP)
    second = wait_change(first)
    assert second != first

    path.write_text("not json")
    proc.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and httpx.get(f"{proc.url}/params").json()["last_reload_error"] is None:
        time.sleep(0.05)
    assert current() == second
    metrics = httpx.get(f"{proc.url}/metrics").text
    assert 'pdroute_params_reloads_total{outcome="failure",trigger="sighup"} 1.0' in metrics
    assert 'pdroute_params_reloads_total{outcome="success",trigger="sighup"} 1.0' in metrics
    log = proc.stop()
    assert "params reload (sighup) refused" in log and "not valid JSON" in log
