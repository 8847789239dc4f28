"""The one builder of error bodies: every 4xx and 5xx the service sends, JSON, with a request id.

    {"error": "<one line naming the field and the reason>", "detail": ..., "request_id": "..."}

Used by the body-size limit (413), validation (422), the connection limits (431, 408), the
exception handlers (404, 405, 401, 403, 422 from domain errors, 429) and the server-error
middleware (500). The request id is the one the client sent (``X-Request-ID``, or the
``request_id`` of a ``/route`` body once parsed), else one made up here; a 500 is logged
under the same id, so an operator can find the traceback of the answer a gateway reports.
"""

from __future__ import annotations

import uuid
from typing import Any

import pydantic_core
from starlette.types import Scope, Send

# Where a request's id is kept in the ASGI scope once known (so every layer reports the same).
SCOPE_KEY = "pdroute.request_id"
HEADER = b"x-request-id"
MAX_REQUEST_ID_LEN = 256  # as a /route body's request_id


def new_request_id() -> str:
    """A fresh id for a request that brought none (16 hex digits)."""
    return uuid.uuid4().hex[:16]


def _clean(raw: bytes) -> str | None:
    text = raw.decode("latin-1")[:MAX_REQUEST_ID_LEN]
    return text if text and text.isprintable() else None


def request_id_of(scope: Scope) -> str:
    """The request's id: the scope's (a parsed ``request_id``), the ``X-Request-ID`` header, or new."""
    known = scope.get(SCOPE_KEY)
    if isinstance(known, str):
        return known
    found = None
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            found = _clean(value)
            break
    request_id = found if found is not None else new_request_id()
    scope[SCOPE_KEY] = request_id
    return request_id


def error_body(message: str, *, request_id: str, detail: Any = None) -> bytes:
    """The JSON bytes of an error answer (``message``: one line naming the field and why)."""
    body = {"error": message, "detail": detail, "request_id": request_id}
    return pydantic_core.to_json(body, fallback=str)


def error_headers(
    body: bytes, request_id: str, extra: list[tuple[bytes, bytes]] | None = None
) -> list[tuple[bytes, bytes]]:
    """Response headers of an error body: JSON, its length, and the request id echoed."""
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (HEADER, request_id.encode("latin-1", "replace")),
        *(extra or []),
    ]


Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body


def error_answer(
    scope: Scope,
    status: int,
    message: str,
    *,
    detail: Any = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> Answer:
    """An error answer: status, headers (the request id echoed) and body."""
    request_id = request_id_of(scope)
    body = error_body(message, request_id=request_id, detail=detail)
    return status, error_headers(body, request_id, headers), body


async def send_answer(send: Send, answer: Answer) -> None:
    """Send a complete answer (``error_answer``'s, or an endpoint's) over ASGI."""
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
