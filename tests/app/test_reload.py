"""Reloading params without a restart: admin endpoint, SIGHUP, file watch; bad files refused."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from app.metrics.service import Metrics
from app.params_store import LoadedParams, ParamsStore
from app.reload import install_sighup, remove_sighup, watch_params_file
from solver.params import MAX_PARAMS_FILE_BYTES
from tests.app.conftest import LiveServer, ServeProcess
from tests.factories import TEST_PARAMS, write_params

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


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    """Put what ``make`` creates in place of ``path`` (a file, a link, a FIFO or a directory)."""
    incoming = path.with_name(".incoming")
    make(incoming)
    if path.is_dir() and not path.is_symlink():
        path.rmdir()  # rename() cannot replace a directory with a file
    elif incoming.is_dir() and (path.exists() or path.is_symlink()):
        path.unlink()
    os.replace(incoming, path)


def _deep_json(p: Path) -> None:
    text = json.dumps(TEST_PARAMS)
    p.write_text(text[:-1] + ', "nested": ' + "[" * 100_000 + "]" * 100_000 + "}")


BAD_VERSIONS: list[tuple[str, Callable[[Path], object], str]] = [
    ("directory", lambda p: p.mkdir(), "is a directory"),
    ("dangling symlink", lambda p: p.symlink_to(p.parent / "gone.json"), "file not found"),
    ("fifo", os.mkfifo, "not a regular file"),
    ("device", lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    ("too large", lambda p: p.write_bytes(b" " * (MAX_PARAMS_FILE_BYTES + 1)), "larger than"),
    ("nested too deep", _deep_json, "deep|not valid JSON"),
    ("integer too large", lambda p: write_params(p, alpha=10**400), "alpha|int too large"),
]


def test_file_watch_survives_every_kind_of_bad_file(
    make_server: Callable[..., LiveServer], tmp_path: Path
) -> None:
    """Each bad version is refused with a clear reason while the old params keep serving, and
    the watch goes on: the good version after it is loaded."""
    path = write_params(tmp_path / "params.json")
    server = make_server(params_path=path, watch_params=True, watch_interval_s=0.05)

    def wait_for(predicate: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return False

    with server.client() as c:

        def error() -> str:
            text: str | None = c.get("/params").json()["last_reload_error"]
            return text or ""

        serving = _params_id(c)
        for n, (name, make, reason) in enumerate(BAD_VERSIONS):
            _replace(path, make)
            assert wait_for(lambda: re.search(reason, error()) is not None), f"{name}: {error()!r}"  # noqa: B023
            assert str(path) in error()
            r = c.post("/route", json={"prompt_len": 1000, "system_load": 4})
            assert r.status_code == 200 and r.json()["params_id"] == serving, name
            _replace(path, lambda p: write_params(p, beta=20.0 + n + 1))  # noqa: B023
            assert wait_for(lambda: _params_id(c) != serving), f"the watch stopped after the {name}"  # noqa: B023
            serving = _params_id(c)
            assert c.get("/params").json()["last_reload_error"] is None
        metrics = c.get("/metrics").text
    n = len(BAD_VERSIONS)
    assert f'pdroute_params_reloads_total{{outcome="failure",trigger="watch"}} {n}.0' in metrics
    assert f'pdroute_params_reloads_total{{outcome="success",trigger="watch"}} {n}.0' in metrics


def test_watch_reloads_a_version_once_it_has_settled(params_file: Path, monkeypatch: Any) -> None:
    """A file caught while it is being written is not refused: only a version seen by two polls
    in a row is loaded (here versions are stand-ins, the polls are scripted)."""
    store = ParamsStore(params_file, time.time)
    script = iter(["v1", "v2", "v2", "v2", None, None, "v3", "v3", "v3"])
    now: list[Any] = [store.signature]
    loaded: list[Any] = []

    def file_signature() -> Any:
        now[0] = next(script, now[0])
        return now[0]

    def reload() -> LoadedParams:
        store.signature = now[0]
        loaded.append(now[0])
        return store.current

    monkeypatch.setattr(store, "file_signature", file_signature)
    monkeypatch.setattr(store, "reload", reload)

    async def run() -> None:
        task = asyncio.create_task(watch_params_file(store, Metrics(CollectorRegistry()), time.time, 0.0))
        for _ in range(50):
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(run())
    # v1 changed before a second look; None (the file gone) is a version too, refused by reload.
    assert loaded == ["v2", None, "v3"]


def test_a_permission_change_is_a_new_version(params_file: Path) -> None:
    # Fixing an unreadable file (chmod) changes neither its content nor its mtime: the watch
    # must still look at it again.
    store = ParamsStore(params_file, time.time)
    assert store.file_signature() == store.signature
    before = os.stat(params_file)
    mode = 0o600
    deadline = time.monotonic() + 5
    while os.stat(params_file).st_ctime_ns == before.st_ctime_ns:  # timestamp granularity
        assert time.monotonic() < deadline, "the file system never changed the ctime"
        time.sleep(0.01)
        mode ^= 0o040
        params_file.chmod(mode)
    after = os.stat(params_file)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )
    assert store.file_signature() != store.signature


def test_a_burst_of_sighups_is_one_reload(params_file: Path) -> None:
    store = ParamsStore(params_file, time.time)
    metrics = Metrics(CollectorRegistry())

    async def run() -> None:
        assert install_sighup(store, metrics, time.time)  # the main thread: real signals
        try:
            for _ in range(100):
                os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(10):
                await asyncio.sleep(0)
            os.kill(os.getpid(), signal.SIGHUP)  # a later signal reloads again
            for _ in range(10):
                await asyncio.sleep(0)
        finally:
            remove_sighup()

    previous = signal.getsignal(signal.SIGHUP)
    asyncio.run(run())
    assert signal.getsignal(signal.SIGHUP) == previous  # restored
    reloads = metrics.registry.get_sample_value(
        "pdroute_params_reloads_total", {"trigger": "sighup", "outcome": "success"}
    )
    assert reloads == 2


def test_sighup_storm_from_startup_on_never_kills_the_service(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    path = write_params(tmp_path / "params.json")
    proc = serve_process("--params", str(path), env={"PDROUTE_WATCH_PARAMS": "false"})
    assert proc.proc.stdout is not None
    # Once this line is out the params are valid and uvicorn is starting: storm from there on.
    for line in proc.proc.stdout:
        if line.startswith("pdroute: serving"):
            break
    else:
        pytest.fail(f"pdroute serve exited before serving: {proc.output()}")
    deadline = time.monotonic() + 20
    ready = False
    while not ready and time.monotonic() < deadline and proc.proc.poll() is None:
        proc.signal(signal.SIGHUP)  # before, while and after the reload handler is installed
        try:
            ready = httpx.get(f"{proc.url}/readyz", timeout=1.0).status_code == 200
        except httpx.TransportError:
            time.sleep(0.01)
    assert proc.proc.poll() is None, f"killed by SIGHUP during startup: {proc.output()}"
    assert ready
    write_params(path, alpha=0.07)
    with httpx.Client(base_url=proc.url, timeout=10) as c:
        for _ in range(200):
            proc.signal(signal.SIGHUP)
            assert c.post("/route", json={"prompt_len": 1000, "system_load": 4}).status_code == 200
        assert proc.proc.poll() is None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.get("/params").json()["params"]["alpha"] != 0.07:
            time.sleep(0.05)
        assert c.get("/params").json()["params"]["alpha"] == 0.07
