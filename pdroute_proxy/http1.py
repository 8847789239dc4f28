"""A lean HTTP/1.1 client for the engines' APIs: keep-alive connections, httptools' parser.

The proxy's every upstream call is one POST (or GET) to an engine it knows, answered with a
JSON object or an SSE stream, and its time to the first byte is on every request's TTFT.
aiohttp's general client spent about 0.5 ms of Python per call before the answer's headers
here (its request and response objects, its connector, its timers, docs/proxy.md
"Overhead"); this one writes the request's bytes on a kept-alive connection, lets httptools
(the C parser uvicorn serves with) parse the answer, chunked or not, and hands the body on as
it arrives. What it does not do, since no engine call needs it: redirects, cookies,
compression, proxies, request streaming.

Failures are ``TransportError``s whose ``cause`` is ``connect`` (no connection in time, or
refused), ``timeout`` (no byte for ``read_s``), ``closed`` (the connection ended before the
answer did) or ``protocol`` (not HTTP, or a line longer than allowed). A kept-alive connection
the engine closed while it was idle is retried once on a fresh one, when it ended before any
byte of the answer came back. Leaving a response before its end closes its connection, which
is how an engine learns that its client went away (vLLM then aborts the request). A body
with neither a length nor chunks ends with its connection, as HTTP/1.1 allows.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType
from typing import cast
from urllib.parse import urlsplit

import httptools

IDLE_S = 4.0  # a connection idle longer is not reused (uvicorn, vLLM's server, closes at 5 s)
HIGH_WATER = 1 << 20  # bytes buffered before reading pauses (a consumer behind)


class TransportError(Exception):
    """A call failed below HTTP; ``cause``: ``connect``, ``timeout``, ``closed``, ``protocol``."""

    cause = "closed"


class ConnectFailed(TransportError):
    cause = "connect"


class ReadTimeout(TransportError, TimeoutError):
    cause = "timeout"


class Closed(TransportError):
    cause = "closed"


class Malformed(TransportError):
    cause = "protocol"


@dataclass(frozen=True)
class Timeouts:
    """``connect_s`` to open a connection, ``read_s`` of silence at most while an answer is read."""

    read_s: float
    connect_s: float


@dataclass(frozen=True)
class _Target:
    key: tuple[str, str, int]  # scheme, host, port: one pool of connections each
    path: bytes
    host_header: bytes


@lru_cache(maxsize=1024)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target((parts.scheme, parts.hostname, port), path.encode(), parts.netloc.encode())


class _Connection(asyncio.Protocol):
    """One connection and the answer being read on it (one at a time)."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.is_lost = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.buffer = bytearray()
        self.status = 0
        self.headers: dict[bytes, bytes] = {}  # names lowercased
        self.has_headers = False
        self.until_eof = False  # the body ends with the connection (no length, not chunked)
        self.is_complete = False
        self.keep_alive = False
        self.got_bytes = False
        self.error: TransportError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.is_paused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Malformed(f"a malformed answer: {exc}"))
            self.close()
            return
        if len(self.buffer) > HIGH_WATER and not self.is_paused and self.transport is not None:
            self.is_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_lost = True
        if self.until_eof and exc is None and not self.is_complete:
            self.is_complete = True  # its clean end is the body's end
            self._wake()
        if not self.is_complete:
            self._fail(Closed(f"connection lost: {exc}" if exc else "connection closed by the engine"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.has_headers = True
        self.until_eof = (
            b"content-length" not in self.headers
            and b"chunked" not in self.headers.get(b"transfer-encoding", b"").lower()
        )

    def on_body(self, body: bytes) -> None:
        self.buffer += body

    def on_message_complete(self) -> None:
        self.is_complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # the reader's side
    def _fail(self, error: TransportError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, read_s: float) -> None:
        """Until more of the answer (or its end, or a failure) has come, at most ``read_s``."""
        if self.error is not None:
            raise self.error
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(read_s, self._time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None
        if self.error is not None:
            raise self.error

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(ReadTimeout("no answer in time"))

    def take(self, end: int) -> bytes:
        data = bytes(self.buffer[:end])
        del self.buffer[:end]
        if self.is_paused and len(self.buffer) <= HIGH_WATER // 2 and self.transport is not None:
            self.is_paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.is_lost = True


class Response:
    """An answer whose status has come; its body as it arrives. Leave it (``async with``) to
    give its connection back (at its end) or close it (before)."""

    def __init__(
        self, client: EngineClient, key: tuple[str, str, int], conn: _Connection, read_s: float
    ) -> None:
        self._client = client
        self._key = key
        self._conn = conn
        self._read_s = read_s
        self.status = conn.status
        self.headers = conn.headers

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines, each with its ``\\n`` (the last one may lack it)."""
        conn = self._conn
        start = 0
        while True:
            end = conn.buffer.find(b"\n", start)
            if 0 <= end < conn.max_line:
                start = 0
                yield conn.take(end + 1)
                continue
            start = len(conn.buffer)
            if end >= 0 or start > conn.max_line:
                raise Malformed(f"a line longer than {conn.max_line} bytes")
            if conn.is_complete:
                if conn.buffer:
                    yield conn.take(len(conn.buffer))
                return
            await conn.wait(self._read_s)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive."""
        conn = self._conn
        while True:
            if conn.buffer:
                yield conn.take(len(conn.buffer))
            elif conn.is_complete:
                return
            else:
                await conn.wait(self._read_s)

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body, or its first ``limit`` bytes."""
        conn = self._conn
        while not conn.is_complete and (limit is None or len(conn.buffer) < limit):
            await conn.wait(self._read_s)
        return conn.take(len(conn.buffer) if limit is None else min(limit, len(conn.buffer)))

    def release(self) -> None:
        conn = self._conn
        if conn.is_complete and conn.keep_alive and not conn.is_lost and not conn.buffer:
            self._client.give_back(self._key, conn)
        else:
            conn.close()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class EngineClient:
    """Kept-alive connections to the engines, ``limit_idle`` at most per engine."""

    def __init__(self, max_line: int, limit_idle: int = 64) -> None:
        self.max_line = max_line
        self.limit_idle = limit_idle
        self.idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self.is_closed = False

    async def open(
        self,
        method: str,
        url: str,
        body: bytes | None,
        timeouts: Timeouts,
        content_type: bytes = b"application/json",
    ) -> Response:
        """Send the request and wait for its answer's status and headers."""
        target = _target(url)
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\n" % (method.encode(), target.path, target.host_header)
        if body is not None:
            head += b"Content-Type: %s\r\nContent-Length: %d\r\n" % (content_type, len(body))
        data = head + b"\r\n" + (body or b"")
        for attempt in (0, 1):
            conn, is_reused = self._idle(target.key)
            if conn is None:
                conn = await self._connect(target.key, timeouts.connect_s)
            assert conn.transport is not None
            conn.transport.write(data)
            try:
                while not conn.has_headers:
                    await conn.wait(timeouts.read_s)
            except Closed:
                conn.close()
                if is_reused and not conn.got_bytes and attempt == 0:
                    continue  # the engine closed it while idle, before reading this request
                raise
            except BaseException:
                conn.close()
                raise
            return Response(self, target.key, conn, timeouts.read_s)
        raise AssertionError("unreachable")

    def _idle(self, key: tuple[str, str, int]) -> tuple[_Connection | None, bool]:
        pool = self.idle.get(key)
        now = time.monotonic()
        while pool:
            conn = pool.pop()
            if not conn.is_lost and now - conn.idle_since < IDLE_S:
                conn._reset()
                return conn, True
            conn.close()
        return None, False

    async def _connect(self, key: tuple[str, str, int], connect_s: float) -> _Connection:
        if self.is_closed:
            raise ConnectFailed("the client is closed")
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_s):
                transport, conn = await loop.create_connection(
                    lambda: _Connection(self.max_line),
                    host,
                    port,
                    ssl=ssl.create_default_context() if scheme == "https" else None,
                )
        except TimeoutError:
            raise ConnectFailed(f"cannot connect to {host}:{port} in {connect_s:g} s") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc}") from None
        conn.transport = transport  # uvloop may call connection_made after returning
        return conn

    def give_back(self, key: tuple[str, str, int], conn: _Connection) -> None:
        pool = self.idle.setdefault(key, [])
        if self.is_closed or len(pool) >= self.limit_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        pool.append(conn)

    async def close(self) -> None:
        self.is_closed = True
        for pool in self.idle.values():
            for conn in pool:
                conn.close()
        self.idle.clear()
        await asyncio.sleep(0)  # let the transports finish closing

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
