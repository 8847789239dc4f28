"""The one middleware stack every request goes through (pure ASGI: it is on ``/route``'s hot path).

Outermost first: ``MetricsMiddleware`` (time and count per route template, every status
included), ``ServerErrorMiddleware`` (an unexpected exception answers a JSON 500 with the
request id and is logged with its traceback), ``BodySizeLimitMiddleware`` (413 before any
parsing). ``app.main.PdrouteApp`` puts the stack around both the ``/route`` endpoints and
FastAPI. The connection-level limits beneath it (request head size, request timeout) are in
``app.http_protocol``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.error_body import request_id_of, send_error
from app.metrics import Metrics

log = logging.getLogger("pdroute.errors")

# The status counted for a request whose client went away (or was cut off by the request
# timeout) before it was answered: nginx's "client closed request". Nobody receives it.
CLIENT_CLOSED_REQUEST = 499
INTERNAL_ERROR = "internal error: the server could not answer this request (logged with its request_id)"


class MetricsMiddleware:
    """Observes handling time and status per route template (bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, clock: Callable[[], float] = time.perf_counter):
        self.app = app
        self.metrics = metrics
        self.clock = clock
        self._cache: dict[tuple[str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = self.clock()
        status: int | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            if status is None:
                status = 500
            raise
        finally:
            if status is None:
                # The app returned without answering: only when the client went away first.
                status = CLIENT_CLOSED_REQUEST
            route = scope.get("route")
            handler = getattr(route, "path", None) or scope.get("pdroute.handler") or "unmatched"
            duration, count = self._children(handler, status)
            duration.observe(self.clock() - start)
            count.inc()

    def _children(self, handler: str, status: int) -> tuple[Any, Any]:
        # labels() validates and locks on every call; the set of (handler, status) is small
        # and bounded (route templates x status codes), so keep the children.
        key = (handler, status)
        children = self._cache.get(key)
        if children is None:
            children = (
                self.metrics.http_duration.labels(handler=handler),
                self.metrics.http_requests.labels(handler=handler, code=str(status)),
            )
            self._cache[key] = children
        return children


class BodySizeLimitMiddleware:
    """Answers 413 to a body over ``max_bytes``, declared or streamed, before any parsing."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, scope: Scope, send: Send) -> None:
        message = f"body: request body is larger than the limit of {self.max_bytes} bytes"
        await send_error(scope, send, 413, message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, send)
                    return
                break
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException, so that FastAPI's body reader re-raises it as it is and
                    # the error handlers answer 413 (any other exception becomes a 400 there).
                    raise HTTPException(
                        413, f"body: request body is larger than the limit of {self.max_bytes} bytes"
                    )
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if exc.status_code != 413 or response_started:
                raise
            await self._reject(scope, send)


class ServerErrorMiddleware:
    """Turns an unexpected exception into a JSON 500 with the request id, logged with its traceback.

    The exception stops here (it is logged once, not again by the server). When the response
    had already started (FastAPI's own error handler answered it), only the log is left to do.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            request_id = request_id_of(scope)
            log.exception(
                "unexpected error answering %s %s (request_id %s)", scope["method"], scope["path"], request_id
            )
            if not started:
                await send_error(scope, send, 500, INTERNAL_ERROR)
