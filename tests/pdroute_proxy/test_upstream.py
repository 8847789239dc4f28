"""The proxy's calls to an engine over real loopback sockets: each failure's cause."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import orjson
import pytest

from pdroute_proxy.upstream import UpstreamError, get_json, post_json, session, stream, timeouts

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
T = TypeVar("T")


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    await reader.readexactly(length)


def _sse(*events: bytes) -> bytes:
    body = b"".join(b"data: " + e + b"\n\n" for e in events)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    )


def _event(token: int) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "text": "", "token_ids": [token], "finish_reason": None}]})


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _events(base: str, read_s: float = 5.0, line_bytes: int = 1 << 16) -> list[tuple[int, ...]]:
    async with session(line_bytes=line_bytes) as client:
        body = {"prompt": [1, 2, 3], "max_tokens": 2}
        return [e.token_ids async for e in stream(client, base, body, timeouts(read_s, 1.0))]


def _cause(coro: Coroutine[Any, Any, object]) -> str:
    async def run() -> str:
        try:
            await coro
        except UpstreamError as exc:
            return exc.cause
        return "no error"

    return asyncio.run(run())


def _with_server(handler: Handler, call: Callable[[str], Awaitable[T]]) -> Coroutine[Any, Any, T]:
    async def run() -> T:
        server, base = await _serve(handler)
        async with server:
            return await call(base)

    return run()


def test_a_whole_stream_is_read_to_done() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_sse(_event(7), _event(8), b"[DONE]"))
        await writer.drain()

    assert asyncio.run(_with_server(handler, _events)) == [(7,), (8,)]


def test_a_refused_connection_is_connect() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _cause(_events(f"http://127.0.0.1:{port}")) == "connect"


def test_an_engine_that_never_answers_is_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await reader.read()  # nothing sent: until the client gives up and closes

    assert _cause(_with_server(handler, lambda base: _events(base, read_s=0.2))) == "timeout"


def test_a_stream_cut_before_done_is_closed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        full = _sse(_event(7), _event(8), b"[DONE]")
        writer.write(full[: full.index(b"data: ") + 20])  # the first event, half of it
        await writer.drain()

    assert _cause(_with_server(handler, _events)) == "closed"


def test_a_line_longer_than_the_buffer_is_protocol() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_sse(b'{"choices": [], "pad": "' + b"x" * 300_000 + b'"}', b"[DONE]"))
        await writer.drain()

    assert _cause(_with_server(handler, lambda base: _events(base, line_bytes=1 << 16))) == "protocol"


@pytest.mark.parametrize(("status", "cause"), [(503, "http_5xx"), (400, "http_4xx")])
def test_an_error_status_keeps_its_body(status: int, cause: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        body = b'{"error": "busy"}'
        writer.write(b"HTTP/1.1 %d Nope\r\ncontent-length: %d\r\n\r\n" % (status, len(body)) + body)
        await writer.drain()

    async def call(base: str) -> UpstreamError:
        async with session() as client:
            try:
                await post_json(client, f"{base}/tokenize", {"prompt": "x"}, timeouts(5.0, 1.0))
            except UpstreamError as exc:
                return exc
        raise AssertionError("no error")

    exc = asyncio.run(_with_server(handler, call))
    assert isinstance(exc, UpstreamError)
    assert (exc.cause, exc.status, exc.body) == (cause, status, b'{"error": "busy"}')


def test_an_answer_that_is_not_a_json_object_is_protocol() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n[1,2]")
        await writer.drain()

    async def call(base: str) -> object:
        async with session() as client:
            return await get_json(client, f"{base}/v1/models", timeouts(5.0, 1.0))

    assert _cause(_with_server(handler, call)) == "protocol"


def test_an_error_body_that_arrives_in_pieces_is_read_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b'HTTP/1.1 500 Oops\r\ncontent-length: 12\r\n\r\n{"error":')
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b" 1}")
        await writer.drain()

    async def call(base: str) -> UpstreamError:
        async with session() as client:
            try:
                async for _ in stream(client, base, {"prompt": [1]}, timeouts(5.0, 1.0)):
                    pass
            except UpstreamError as exc:
                return exc
        raise AssertionError("no error")

    exc = asyncio.run(_with_server(handler, call))
    assert (exc.cause, exc.body) == ("http_5xx", b'{"error": 1}')
