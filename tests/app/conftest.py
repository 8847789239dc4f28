"""Live servers for HTTP tests: real uvicorn on 127.0.0.1, spoken to with httpx.

``live_server`` runs the app in a thread of this process (so a test can inject a fresh
registry and a fake clock); ``ServeProcess`` runs ``pdroute serve`` as a child process (for
signals, worker processes and startup failures).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp

from app.main import create_app
from app.settings import Settings
from tests.conftest import stop_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LiveServer:
    app: FastAPI
    url: str
    registry: CollectorRegistry

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10.0, **kwargs)


@dataclass
class Running:
    """A uvicorn server in a thread of this process."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_server(app: ASGIApp, **config: Any) -> Running:
    """Run ``app`` under uvicorn on a free loopback port (``config``: more ``uvicorn.Config`` options)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **config)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    return Running(f"http://127.0.0.1:{port}", server, thread)


@pytest.fixture
def make_server() -> Iterator[Callable[..., LiveServer]]:
    """Start ``create_app(Settings(**settings))`` on a free loopback port; stopped at teardown."""
    running: list[Running] = []

    def _make(clock: Callable[[], float] = time.time, **settings: Any) -> LiveServer:
        registry = CollectorRegistry()
        app = create_app(Settings(**settings), registry=registry, clock=clock)
        handle = start_server(app)
        running.append(handle)
        return LiveServer(app, handle.url, registry)

    yield _make
    for handle in running:
        handle.stop()


@pytest.fixture
def live_server(make_server: Callable[..., LiveServer], params_file: Path) -> LiveServer:
    return make_server(params_path=params_file, watch_params=False)


class ServeProcess:
    """``pdroute serve`` in a child process on a free port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(self.port), *args],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pdroute serve exited {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("pdroute serve did not become ready")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> str:
        stop_process(self.proc)
        return self.output()

    def output(self) -> str:
        """Everything the process printed, once it has exited (the pipe is then closed)."""
        if self.proc.poll() is None:
            return ""
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self._output = self.proc.stdout.read()
            self.proc.stdout.close()
        return getattr(self, "_output", "")


@pytest.fixture
def serve_process() -> Iterator[Callable[..., ServeProcess]]:
    procs: list[ServeProcess] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> ServeProcess:
        p = ServeProcess(*args, env=env)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        p.stop()
