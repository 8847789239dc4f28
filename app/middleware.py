"""The one middleware every request goes through: ``RequestEnvelope`` (pure ASGI, on ``/route``'s hot path).

Around every request, in one layer (each nested ASGI layer costs a coroutine per request, and
``/route`` is called once per LLM request):

- the body-size limit: 413 before any parsing, for a declared or a streamed body;
- the JSON 500: an unexpected exception answers ``app.error_body``'s body with the request id
  and is logged once with its traceback;
- timing and counting per route template for ``/metrics`` (every status, the 500 included; a
  client gone before its answer counts 499).

``app.main.PdrouteApp`` puts it around both the ``/route`` endpoints and FastAPI. The
connection-level limits beneath it (request head size, request timeout) are in
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


class RequestEnvelope:
    """Body-size limit, JSON 500 and per-route metrics around ``app`` (module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        max_body_bytes: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_bytes = max_body_bytes
        self.clock = clock
        self._cache: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._too_large = f"body: request body is larger than the limit of {max_body_bytes} bytes"

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

        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server refuses a malformed length before the app runs
                break
        try:
            if declared is None:  # chunked: count what arrives
                await self.app(scope, self._limited(receive), send_wrapper)
            elif declared > self.max_bytes:
                await send_error(scope, send_wrapper, 413, self._too_large)
            else:  # the server delivers no more than the declared length: nothing to count
                await self.app(scope, receive, send_wrapper)
        except HTTPException as exc:  # the 413 of a streamed body, raised from its receive
            if status is not None:
                raise
            await send_error(scope, send_wrapper, exc.status_code, str(exc.detail))
        except Exception:
            request_id = request_id_of(scope)
            log.exception(
                "unexpected error answering %s %s (request_id %s)", scope["method"], scope["path"], request_id
            )
            if status is None:
                await send_error(scope, send_wrapper, 500, INTERNAL_ERROR)
        finally:
            if status is None:
                # Returned (or was cancelled) without answering: the client went away first.
                status = CLIENT_CLOSED_REQUEST
            route = scope.get("route")
            handler = getattr(route, "path", None) or scope.get("pdroute.handler") or "unmatched"
            children = self._cache.get((handler, status))
            if children is None:
                children = self._children(handler, status)
            children[0].observe(self.clock() - start)
            children[1].inc()

    def _limited(self, receive: Receive) -> Receive:
        received = 0
        limit = self.max_bytes

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # An HTTPException, so that FastAPI's body reader re-raises it as it is
                    # (any other exception becomes a 400 there); 413 is answered above.
                    raise HTTPException(413, self._too_large)
            return message

        return limited_receive

    def _children(self, handler: str, status: int) -> tuple[Any, Any]:
        # labels() validates on every call; the set of (handler, status) is small and bounded
        # (route templates x status codes), so keep the children.
        children = (
            self.metrics.http_duration.labels(handler=handler),
            self.metrics.http_requests.labels(handler=handler, code=str(status)),
        )
        self._cache[(handler, status)] = children
        return children
