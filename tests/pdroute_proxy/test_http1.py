"""The proxy's HTTP/1.1 client over real loopback sockets: connections kept and given up."""

from __future__ import annotations

import asyncio

import pytest

from pdroute_proxy.http1 import Closed, EngineClient, Malformed, ReadTimeout, Timeouts

T = Timeouts(read_s=5.0, connect_s=1.0)


class Server:
    """A loopback server answering each request with ``answer`` on kept-alive connections;
    counts connections and requests, and what each connection saw last."""

    def __init__(self, answer: bytes, close_after: int | None = None, drop_after: int | None = None) -> None:
        self.answer = answer
        self.close_after = close_after  # requests per connection before the server closes it
        self.drop_after = drop_after  # requests answered per connection; the next is read, then closed
        self.connections = 0
        self.requests = 0
        self.eofs = 0
        self.active = 0  # connections being served
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.active += 1
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.eofs += 1
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.bodies.append(await reader.readexactly(length))
                if self.drop_after is not None and served >= self.drop_after:
                    return  # read, never answered: as a server closing an idle connection meets it
                self.requests += 1
                writer.write(self.answer)
                await writer.drain()
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    return
        finally:
            writer.close()
            self.active -= 1

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/x"

    async def __aexit__(self, *exc: object) -> None:
        for _ in range(200):  # the client has closed its connections: their handlers see the end
            if not self.active:
                break
            await asyncio.sleep(0.01)
        self.server.close()


def _chunked(*parts: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n" + body


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"


def test_calls_in_turn_share_one_kept_alive_connection() -> None:
    async def run() -> Server:
        server = Server(OK)
        async with server as url, EngineClient(max_line=1024) as client:
            for i in range(3):
                response = await client.open("POST", url, b'{"n": %d}' % i, T)
                async with response:
                    assert (response.status, await response.read()) == (200, b"{}")
        return server

    server = asyncio.run(run())
    assert (server.connections, server.requests) == (1, 3)
    assert server.bodies == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']


def test_a_connection_the_engine_closed_while_idle_is_replaced_without_an_error() -> None:
    async def run() -> Server:
        server = Server(OK, close_after=1)  # the server closes after each answer, unannounced
        async with server as url, EngineClient(max_line=1024) as client:
            for _ in range(3):
                response = await client.open("GET", url, None, T)
                async with response:
                    assert await response.read() == b"{}"
                await asyncio.sleep(0.05)  # the close reaches the client, or not yet: both are fine
        return server

    server = asyncio.run(run())
    assert (server.connections, server.requests) == (3, 3)


def test_a_kept_alive_connection_closed_before_any_answer_is_retried_once_on_a_fresh_one() -> None:
    async def run() -> Server:
        server = Server(OK, drop_after=1)
        async with server as url, EngineClient(max_line=1024) as client:
            for i in range(2):
                response = await client.open("POST", url, b'{"n": %d}' % i, T)
                async with response:
                    assert await response.read() == b"{}"
        return server

    server = asyncio.run(run())
    assert (server.connections, server.requests) == (2, 2)
    assert server.bodies == [b'{"n": 0}', b'{"n": 1}', b'{"n": 1}']  # the second, sent twice


def test_a_fresh_connection_closed_before_any_answer_is_not_retried() -> None:
    async def run() -> None:
        async with Server(OK, drop_after=0) as url, EngineClient(max_line=1024) as client:
            await client.open("POST", url, b"{}", T)

    with pytest.raises(Closed):
        asyncio.run(run())


def test_a_chunked_stream_comes_as_lines_and_its_headers_are_kept() -> None:
    async def run() -> tuple[list[bytes], bytes | None]:
        server = Server(_chunked(b"data: 1\n\nda", b"ta: 2\n\n", b"data: [DONE]\n\n"))
        async with server as url, EngineClient(max_line=1024) as client:
            response = await client.open("POST", url, b"{}", T)
            async with response:
                return [line async for line in response.lines()], response.headers.get(b"content-type")

    lines, kind = asyncio.run(run())
    assert lines == [b"data: 1\n", b"\n", b"data: 2\n", b"\n", b"data: [DONE]\n", b"\n"]
    assert kind == b"text/event-stream"


def test_a_body_without_a_length_ends_with_its_connection() -> None:
    async def run() -> tuple[list[bytes], Server]:
        server = Server(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n", close_after=1
        )
        async with server as url, EngineClient(max_line=1024) as client:
            response = await client.open("POST", url, b"{}", T)
            async with response:
                lines = [line async for line in response.lines()]
            response = await client.open("POST", url, b"{}", T)  # not reused: a fresh connection
            async with response:
                assert await response.read() == b"data: 1\n\n"
        return lines, server

    lines, server = asyncio.run(run())
    assert lines == [b"data: 1\n", b"\n"]
    assert server.connections == 2


def test_a_line_longer_than_allowed_is_malformed() -> None:
    async def run() -> None:
        server = Server(_chunked(b"data: " + b"x" * 5000 + b"\n\n"))
        async with server as url, EngineClient(max_line=1024) as client:
            response = await client.open("POST", url, b"{}", T)
            async with response:
                async for _ in response.lines():
                    pass

    with pytest.raises(Malformed):
        asyncio.run(run())


def test_a_response_left_before_its_end_closes_its_connection() -> None:
    """How an engine learns that its client went away (vLLM then aborts the request)."""

    async def run() -> Server:
        server = Server(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\ndata:\r\n")  # no end
        async with server as url, EngineClient(max_line=1024) as client:
            response = await client.open("POST", url, b"{}", T)
            async with response:
                async for chunk in response.chunks():
                    assert chunk == b"data:"
                    break
            for _ in range(100):
                if server.eofs:
                    break
                await asyncio.sleep(0.01)
            response = await client.open("POST", url, b"{}", T)  # a fresh connection
            async with response:
                pass
        return server

    server = asyncio.run(run())
    assert server.eofs >= 1
    assert server.connections == 2


def test_an_engine_silent_past_the_read_timeout_is_a_timeout() -> None:
    async def run() -> None:
        async with Server(b"") as url, EngineClient(max_line=1024) as client:
            await client.open("POST", url, b"{}", Timeouts(read_s=0.1, connect_s=1.0))

    with pytest.raises(ReadTimeout):
        asyncio.run(run())


def test_an_answer_cut_short_is_closed() -> None:
    async def run() -> None:
        server = Server(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}", close_after=1)
        async with server as url, EngineClient(max_line=1024) as client:
            response = await client.open("POST", url, b"{}", T)
            async with response:
                await response.read()

    with pytest.raises(Closed):
        asyncio.run(run())
