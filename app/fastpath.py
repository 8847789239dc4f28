"""``POST /route`` without FastAPI's middleware stack, router and dependency solving.

``PdrouteApp`` (the FastAPI subclass ``create_app`` returns) hands ``POST /route`` to
``RouteEndpoint``, wrapped in the same metrics and body-size middleware as every other
request. It serves exactly what the FastAPI endpoint serves (both call
``RouteHandler.decide``), with the same 422 body on bad input; everything else goes down the
normal stack. Measured in ``bench/bench_route.py``: the normal stack costs more than the
decision, and ``/route`` is called once per LLM request by the gateway.
"""

from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import validation_error_body
from app.routes.route import RouteHandler

_JSON = (b"content-type", b"application/json")


class RouteEndpoint:
    """An ASGI endpoint answering ``/route`` bodies through ``RouteHandler.decide``."""

    def __init__(self, handler: RouteHandler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["pdroute.handler"] = "/route"  # the metrics label, as the router would set it
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            body = self.handler.decide(b"".join(chunks))
            status = 200
        except RequestValidationError as exc:
            body = json.dumps(validation_error_body(list(exc.errors()))).encode()
            status = 422
        headers = [_JSON, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class PdrouteApp(FastAPI):
    """FastAPI, with ``POST /route`` dispatched to ``route_fast_path`` when one is set."""

    route_fast_path: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.route_fast_path
        if (
            fast is not None
            and scope["type"] == "http"
            and scope["path"] == "/route"
            and scope["method"] == "POST"
        ):
            await fast(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
