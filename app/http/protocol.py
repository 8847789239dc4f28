"""The HTTP connection limits ``pdroute serve`` gives uvicorn: a bounded request head and a
request timeout (``LimitedHttpToolsProtocol``).

uvicorn's httptools protocol buffers a request line and headers of any size and waits for a
request or a body forever; behind a gateway that is only a risk, but a router on every
request's path must not be the weak link. This subclasses uvicorn's protocol class, so it
depends on uvicorn's internals: pyproject.toml bounds uvicorn's version, and
tests/app/http/test_protocol.py exercises every path over raw sockets.
"""

from __future__ import annotations

import asyncio
import logging

from app.http.error_body import error_body, error_headers, new_request_id

# The request line and headers of one request, in bytes: a gateway's /route call needs a few
# hundred. Past this the connection is answered 431 and closed; without a limit the HTTP parser
# would buffer a never-ending header in memory.
MAX_HEAD_BYTES = 65_536
# A client has this long to send one whole request (head and body) from its first byte, or from
# opening the connection; then it is answered 408 and disconnected. A request takes
# milliseconds; a client trickling bytes would otherwise hold a connection and a task forever.
REQUEST_TIMEOUT_S = 10.0

log = logging.getLogger("pdroute.http")


def _http_error(
    status: int, reason: str, message: str, default_headers: list[tuple[bytes, bytes]], request_id: str
) -> bytes:
    """A complete ``Connection: close`` response with ``app.http.error_body``'s JSON body."""
    body = error_body(message, request_id=request_id)
    head = [f"HTTP/1.1 {status} {reason}\r\n".encode()]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [name + b": " + value + b"\r\n" for name, value in error_headers(body, request_id)]
    head.append(b"connection: close\r\n\r\n")
    return b"".join(head) + body


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # uvicorn without its [standard] extra: h11 with its own head limit
    HTTP_PROTOCOL = "h11"
else:
    HTTP_PROTOCOL = "app.http.protocol:LimitedHttpToolsProtocol"

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with a bounded request head and a request timeout.

        uvicorn's httptools protocol buffers a request line and headers of any size (and
        copies the URL on every chunk) and waits for a request or a body forever. This one
        answers 431 past ``MAX_HEAD_BYTES`` of head and 408 when a request is not complete
        ``REQUEST_TIMEOUT_S`` after its first byte (or after the connection opened), then closes
        the connection. Between requests, uvicorn's keep-alive timeout applies as before.
        """

        max_head_bytes = MAX_HEAD_BYTES
        request_timeout_s = REQUEST_TIMEOUT_S

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._in_head = True  # the current request's head is not complete yet
            self._head_bytes = 0
            self._deadline: asyncio.TimerHandle | None = None
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._in_head:
                super().data_received(data)
                return
            allowance = self.max_head_bytes - self._head_bytes
            if len(data) <= allowance:
                self._head_bytes += len(data)
                super().data_received(data)
                return
            # Feed no more than the allowance; if the head is still incomplete after it, refuse.
            self._head_bytes = self.max_head_bytes
            super().data_received(data[:allowance])
            if self.transport.is_closing():
                return
            if self._in_head:
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"request line and headers are larger than the limit of {self.max_head_bytes} bytes",
                )
                return
            super().data_received(data[allowance:])

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            self._in_head = True
            self._head_bytes = 0
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._disarm()
            super().handle_websocket_upgrade()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(self.request_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            # Answer only where no response is on the wire: before this request's head is
            # complete, the previous response must be finished; after it, this one unstarted.
            if cycle is None or (cycle.response_complete if self._in_head else not cycle.response_started):
                self._refuse(
                    408, "Request Timeout", f"request not received within {self.request_timeout_s:g} s"
                )
            else:
                self.transport.close()

        def _refuse(self, status: int, reason: str, message: str) -> None:
            self._disarm()
            # The head was refused or never completed, so no request id was read: a new one,
            # logged with the refusal.
            request_id = new_request_id()
            log.warning(
                "%s from %s (request_id %s): %s", status, self.client and self.client[0], request_id, message
            )
            response = _http_error(status, reason, message, self.server_state.default_headers, request_id)
            self.transport.write(response)
            self.transport.close()
