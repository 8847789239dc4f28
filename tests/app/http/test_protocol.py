"""The service under abusive clients: huge heads, slow heads and bodies, clients that vanish.

Real uvicorn on 127.0.0.1 with the protocol ``pdroute serve`` gives it
(``app.http_protocol.LimitedHttpToolsProtocol``), spoken to over raw sockets so that a request can
be cut, stalled or oversized at will. The request timeout is shortened for the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client import CollectorRegistry

from app.cli.main import build_parser
from app.http.protocol import HTTP_PROTOCOL, MAX_HEAD_BYTES, LimitedHttpToolsProtocol
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import LiveServer, ServeProcess, free_port

ROUTE_BODY = json.dumps({"prompt_len": 1000, "system_load": 4}).encode()


class ShortTimeout(LimitedHttpToolsProtocol):
    request_timeout_s = 0.5


@pytest.fixture
def limited(params_file: Path) -> Iterator[LiveServer]:
    registry = CollectorRegistry()
    app = create_app(Settings(params_path=params_file, watch_params=False), registry=registry)
    port = free_port()
    # A long keep-alive, so that only the request timeout under test can close a connection.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="error", http=ShortTimeout, timeout_keep_alive=60
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    yield LiveServer(app, f"http://127.0.0.1:{port}", registry)
    server.should_exit = True
    thread.join(timeout=10)


def connect(server: LiveServer) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s at most)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def head(path: str, length: int | None = None, extra: bytes = b"") -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"host: 127.0.0.1", b"content-type: application/json"]
    if length is not None:
        lines.append(f"content-length: {length}".encode())
    return b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n"


def status_of(response: bytes) -> int:
    """The status of a raw response; an error's body must be the service's JSON error body."""
    status = int(response.split(b" ", 2)[1])
    if status >= 400 and b"\r\n\r\n" in response:
        head, body = response.split(b"\r\n\r\n", 1)
        assert b"content-type: application/json" in head.lower(), head
        problem = json.loads(body)
        assert problem["error"] and problem["request_id"], problem
    return status


def counted(server: LiveServer, handler: str) -> dict[str, float]:
    """``pdroute_http_requests_total`` for one handler, by code."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("pdroute_http_requests_total{") and f'handler="{handler}"' in line:
            code = line.split('code="')[1].split('"')[0]
            out[code] = float(line.rsplit(" ", 1)[1])
    return out


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def still_serves(server: LiveServer) -> None:
    r = httpx.post(f"{server.url}/route", content=ROUTE_BODY, timeout=10)
    assert r.status_code == 200 and r.json()["decision"] in ("collocated", "disaggregated")


@pytest.mark.parametrize("where", ["header", "url"])
def test_a_huge_request_head_is_refused_with_431(limited: LiveServer, where: str) -> None:
    sock = connect(limited)
    if where == "header":
        sock.sendall(head("/route", len(ROUTE_BODY))[:-2])
        pad = b"x-pad: " + b"a" * 60_000 + b"\r\n"
    else:
        sock.sendall(b"GET /healthz?q=")
        pad = b"a" * 60_000
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before the end
        for _ in range(2 * MAX_HEAD_BYTES // len(pad) + 2):  # well past the limit
            sock.sendall(pad)
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 431
    assert f"larger than the limit of {MAX_HEAD_BYTES} bytes".encode() in response
    still_serves(limited)


def test_a_large_body_arriving_with_its_head_is_not_mistaken_for_a_huge_head(limited: LiveServer) -> None:
    # Over MAX_HEAD_BYTES in one send: the head is complete within the allowance, the rest is body.
    items = [{"prompt_len": 1 + i, "system_load": i % 40, "request_id": f"r{i}"} for i in range(3000)]
    body = json.dumps({"requests": items}).encode()
    assert len(body) > 2 * MAX_HEAD_BYTES
    sock = connect(limited)
    sock.sendall(head("/route/batch", len(body), b"connection: close\r\n") + body)
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 200
    results = json.loads(response.split(b"\r\n\r\n", 1)[1])["results"]
    assert [r["request_id"] for r in results] == [f"r{i}" for i in range(3000)]


def test_pipelined_requests_and_keep_alive_past_the_timeout(limited: LiveServer) -> None:
    sock = connect(limited)
    one = head("/route", len(ROUTE_BODY)) + ROUTE_BODY
    sock.sendall(one + one)  # two requests in one segment
    received = b""
    while received.count(b"HTTP/1.1 200") < 2:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    # Idle between requests for longer than the request timeout: the keep-alive timeout
    # applies there, not the request timeout, so the connection still serves.
    time.sleep(3 * ShortTimeout.request_timeout_s)
    sock.sendall(head("/route", len(ROUTE_BODY), b"connection: close\r\n") + ROUTE_BODY)
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 200


def _answer_one(sock: socket.socket) -> int:
    """Send one /route request on a kept-alive connection; the status of its answer."""
    sock.sendall(head("/route", len(ROUTE_BODY)) + ROUTE_BODY)
    received = b""
    while b"\r\n\r\n" not in received or not received.endswith(b"}"):
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    return status_of(received)


def test_a_busy_connection_outlives_the_request_timeout_then_a_stall_gets_408(limited: LiveServer) -> None:
    # Requests one after another for three request timeouts: each moves the connection's one
    # deadline on, so none is cut off however long the connection lives ...
    sock = connect(limited)
    statuses = []
    for _ in range(15):
        statuses.append(_answer_one(sock))
        time.sleep(ShortTimeout.request_timeout_s / 5)
    assert statuses == [200] * 15
    # ... and a request stalled after them still gets its 408.
    sock.sendall(b"POST /route HTTP/1.1\r\nhost: 127.0.0.1\r\n")
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 408
    still_serves(limited)


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /route HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-le"],
    ids=["nothing", "half a head"],
)
def test_a_client_that_does_not_send_its_request_gets_408(limited: LiveServer, sent: bytes) -> None:
    sock = connect(limited)
    sock.sendall(sent)
    start = time.monotonic()
    response = read_all(sock)  # the server answers and closes; nothing more is sent
    sock.close()
    assert status_of(response) == 408
    assert b"request not received within 0.5 s" in response
    assert time.monotonic() - start >= ShortTimeout.request_timeout_s * 0.9
    still_serves(limited)


@pytest.mark.parametrize("path", ["/route", "/route/batch"])
def test_a_stalled_body_gets_408_and_is_counted_499_not_500(limited: LiveServer, path: str) -> None:
    sock = connect(limited)
    sock.sendall(head(path, 100) + b'{"prompt_len": ')
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 408
    codes = wait_for(lambda: counted(limited, path).get("499") and counted(limited, path), "the 499")
    assert codes == {"499": 1.0}
    still_serves(limited)


@pytest.mark.parametrize("path", ["/route", "/route/batch"])
def test_a_client_gone_mid_body_is_counted_499_not_500(
    make_server: Callable[..., LiveServer], params_file: Path, path: str
) -> None:
    server = make_server(params_path=params_file, watch_params=False)
    sock = connect(server)
    sock.sendall(head(path, 100) + b'{"prompt_len": ')
    time.sleep(0.05)  # let the server start reading the body (either order must count 499)
    sock.close()
    codes = wait_for(lambda: counted(server, path).get("499") and counted(server, path), "the 499")
    assert codes == {"499": 1.0}
    still_serves(server)


def test_pdroute_serve_refuses_a_huge_head(
    serve_process: Callable[..., ServeProcess], params_file: Path
) -> None:
    proc = serve_process("--params", str(params_file))
    proc.wait_ready()
    host, port = proc.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before the end
        sock.sendall(b"GET /healthz HTTP/1.1\r\nx-pad: " + b"a" * (MAX_HEAD_BYTES + 1024) + b"\r\n\r\n")
    response = read_all(sock)
    sock.close()
    assert status_of(response) == 431
    assert httpx.get(f"{proc.url}/healthz", timeout=10).status_code == 200


def test_serve_configures_uvicorn_with_the_limits(monkeypatch: pytest.MonkeyPatch, params_file: Path) -> None:
    seen: dict[str, Any] = {}

    def fake_run(app: str, **kwargs: Any) -> None:
        seen.update(kwargs, sighup=signal.getsignal(signal.SIGHUP))

    monkeypatch.setattr(uvicorn, "run", fake_run)
    environ = dict(os.environ)  # serve.run exports its choices for worker processes
    previous = signal.getsignal(signal.SIGHUP)
    try:
        args = build_parser().parse_args(["serve", "--params", str(params_file), "--port", "8123"])
        assert args.func(args) == 0
    finally:
        signal.signal(signal.SIGHUP, previous)
        os.environ.clear()
        os.environ.update(environ)
    assert seen["http"] == HTTP_PROTOCOL == "app.http.protocol:LimitedHttpToolsProtocol"
    assert seen["h11_max_incomplete_event_size"] == MAX_HEAD_BYTES
    # In-flight requests cannot hold a shutdown past the Deployment's grace period (30 s).
    assert 0 < seen["timeout_graceful_shutdown"] < 25
    # An early SIGHUP (before the reload handler is installed) is ignored, not fatal.
    assert seen["sighup"] == signal.SIG_IGN
