"""The one middleware every request goes through: ``RequestEnvelope`` (pure ASGI, on ``/route``'s hot path).

Around every request, in one layer (each nested ASGI layer costs a coroutine per request, and
``/route`` is called once per LLM request):

- the body-size limit: 413 before any parsing, for a declared or a streamed body;
- the JSON 500: an unexpected exception answers ``app.http.error_body``'s body with the request id
  and is logged once with its traceback;
- timing and counting per route template for ``/metrics`` (every status, the 500 included; a
  client gone before its answer counts 499).

``POST /route`` and ``POST /route/batch`` are body endpoints (``BodyEndpoint``): a function of
the request's bytes to a complete answer, with no ASGI of their own. The envelope reads their
body, calls them and sends the answer itself, with no coroutine, ``send`` wrapper or router in
between (a speed exception, kept because it pays: 17 us a /route in process against 40 us
through FastAPI's router; ``bench/bench_route.py``). Every other request goes to the wrapped
app (FastAPI). ``app.main.PdrouteApp`` puts the envelope in front of everything. The
connection-level limits beneath it (request head size, request timeout) are in
``app.http.protocol``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http.error_body import Answer, error_answer, request_id_of, send_answer
from app.metrics.service import Metrics

log = logging.getLogger("pdroute.errors")

# The status counted for a request whose client went away (or was cut off by the request
# timeout) before it was answered: nginx's "client closed request". Nobody receives it.
CLIENT_CLOSED_REQUEST = 499
INTERNAL_ERROR = "internal error: the server could not answer this request (logged with its request_id)"


class BodyEndpoint(Protocol):
    """An endpoint answering from the request body alone (``/route``): bytes in, answer out.

    ``respond`` maps the errors it expects (invalid input, domain errors) to their answers; any
    other exception becomes the envelope's JSON 500."""

    path: str  # the route template, the metrics label

    def respond(self, raw: bytes, scope: Scope) -> Answer: ...


class BodyTooLarge(Exception):
    """A streamed body passed the limit."""


class RequestEnvelope:
    """Body-size limit, JSON 500 and per-route metrics around ``app`` (module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        max_body_bytes: int,
        clock: Callable[[], float] = time.perf_counter,
        body_endpoints: Mapping[str, BodyEndpoint] | None = None,
    ) -> None:
        self.app = app
        self.body_endpoints = dict(body_endpoints or {})  # POST path -> endpoint
        self.metrics = metrics
        self.max_bytes = max_body_bytes
        self.clock = clock
        self._cache: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._too_large = f"body: request body is larger than the limit of {max_body_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST":
            endpoint = self.body_endpoints.get(scope["path"])
            if endpoint is not None:
                await self._answer_body(endpoint, scope, receive, send)
                return
        start = self.clock()
        status: int | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        declared = _declared_length(scope)
        try:
            if declared is None:  # chunked: count what arrives
                await self.app(scope, self._limited(receive), send_wrapper)
            elif declared > self.max_bytes:
                await send_answer(send_wrapper, error_answer(scope, 413, self._too_large))
            else:  # the server delivers no more than the declared length: nothing to count
                await self.app(scope, receive, send_wrapper)
        except HTTPException as exc:  # the 413 of a streamed body, raised from its receive
            if status is not None:
                raise
            await send_answer(send_wrapper, error_answer(scope, exc.status_code, str(exc.detail)))
        except Exception:
            request_id = request_id_of(scope)
            log.exception(
                "unexpected error answering %s %s (request_id %s)", scope["method"], scope["path"], request_id
            )
            if status is None:
                await send_answer(send_wrapper, error_answer(scope, 500, INTERNAL_ERROR))
        finally:
            if status is None:
                # Returned (or was cancelled) without answering: the client went away first.
                status = CLIENT_CLOSED_REQUEST
            route = scope.get("route")
            self._count(getattr(route, "path", None) or "unmatched", status, start)

    async def _answer_body(self, endpoint: BodyEndpoint, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body, call ``endpoint``, send its answer: the envelope's work in one frame."""
        start = self.clock()
        status = CLIENT_CLOSED_REQUEST  # until an answer starts
        try:
            declared = _declared_length(scope)
            if declared is not None and declared > self.max_bytes:
                answer = error_answer(scope, 413, self._too_large)
            else:
                try:
                    # The server delivers no more than a declared length: only a stream is counted.
                    raw = await _read_body(receive, self.max_bytes if declared is None else None)
                except BodyTooLarge:
                    answer = error_answer(scope, 413, self._too_large)
                else:
                    if raw is None:
                        return  # the client went away
                    answer = endpoint.respond(raw, scope)
            status, headers, body = answer  # sent here, not through send_answer: one coroutine less
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except Exception:
            log.exception(
                "unexpected error answering POST %s (request_id %s)", scope["path"], request_id_of(scope)
            )
            if status == CLIENT_CLOSED_REQUEST:
                status = 500
                await send_answer(send, error_answer(scope, 500, INTERNAL_ERROR))
        finally:
            self._count(endpoint.path, status, start)

    def _count(self, handler: str, status: int, start: float) -> None:
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


def _declared_length(scope: Scope) -> int | None:
    """The request's ``content-length`` (None: chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the server refuses a malformed length before the app runs
    return None


async def _read_body(receive: Receive, limit: int | None) -> bytes | None:
    """The whole body (None: the client went away); ``BodyTooLarge`` past ``limit`` bytes."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    raw: bytes = message.get("body", b"")
    if message.get("more_body", False):
        chunks = [raw]
        size = len(raw)
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if limit is not None and size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
    if limit is not None and len(raw) > limit:
        raise BodyTooLarge
    return raw
