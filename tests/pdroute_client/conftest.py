"""Servers for the client's tests, on loopback: the real service, and tiny ASGI apps that fail.

``serve(app)`` runs any ASGI app under uvicorn on 127.0.0.1 and returns a handle whose
``stop()`` kills it mid-test (the client then meets a refused connection).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import Running, free_port, start_server


def nowhere() -> str:
    """The URL of a loopback port nothing listens on (bound, then released): connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def serve() -> Iterator[Callable[[ASGIApp], Running]]:
    """Run an ASGI app on loopback (a short graceful shutdown: ``stop()`` mid-test); stopped at teardown."""
    running: list[Running] = []

    def _serve(app: ASGIApp) -> Running:
        handle = start_server(app, timeout_graceful_shutdown=1)
        running.append(handle)
        return handle

    yield _serve
    for handle in running:
        handle.stop()


@pytest.fixture
def start_service(serve: Callable[[ASGIApp], Running]) -> Callable[..., Running]:
    """The real service (``create_app``) with the given settings, on a fresh registry."""

    def _start(**settings: Any) -> Running:
        settings.setdefault("watch_params", False)
        app = create_app(Settings(**settings), registry=CollectorRegistry())
        return serve(app)

    return _start


@pytest.fixture
def service(start_service: Callable[..., Running], queue_aware_params_file: Path) -> Running:
    return start_service(params_path=queue_aware_params_file)


class Slow:
    """Wraps an ASGI app: ``/route`` and ``/route/batch`` answer after ``delay_s`` (the rest at once)."""

    def __init__(self, app: ASGIApp, delay_s: float) -> None:
        self.app = app
        self.delay_s = delay_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/route"):
            await asyncio.sleep(self.delay_s)
        await self.app(scope, receive, send)


def fixed(status: int, body: bytes, *, paths: tuple[str, ...] = ("/route", "/route/batch")) -> ASGIApp:
    """An app answering ``status`` with ``body`` on ``paths`` and 404 elsewhere (no /params)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        hit = scope["path"] in paths
        out = body if hit else json.dumps({"error": "not found"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": status if hit else 404, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app
