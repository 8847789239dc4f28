"""Domain errors and validation errors mapped to HTTP responses, in one place.

Every error body is built by ``app.http.error_body``: ``{"error": "<one readable line>", "detail":
..., "request_id": ...}``; ``error`` names the field and the reason so an operator can act on
it without reading the detail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.http.envelope import CLIENT_CLOSED_REQUEST, INTERNAL_ERROR
from app.http.error_body import error_body, request_id_of
from pdroute_core.errors import InvalidParams, PdrouteError
from solver.errors import FitError, InfeasiblePlan, InvalidCurves, InvalidProfile

STATUS_BY_ERROR: tuple[tuple[type[PdrouteError], int], ...] = (
    (InvalidParams, 422),
    (InvalidProfile, 422),
    (FitError, 422),
    (InfeasiblePlan, 422),
    (InvalidCurves, 422),
)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) if parts else "body"


def describe_validation_errors(errors: list[dict[str, Any]]) -> str:
    """One line naming each bad field and why, e.g. ``prompt_len: Input should be >= 1``."""
    items = []
    for err in errors[:5]:
        if err.get("type") == "json_invalid":
            items.append(f"body: not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
        else:
            items.append(f"{_field(err.get('loc', ()))}: {err.get('msg', 'invalid')}")
    more = len(errors) - len(items)
    return "; ".join(items) + (f"; and {more} more" if more > 0 else "")


def validation_error_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The 422 body for validation errors: one readable line plus the (JSON-safe) details."""
    detail = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg"), "type": err.get("type")}
        for err in errors[:50]
    ]
    return {"error": describe_validation_errors(errors), "detail": detail}


def status_for(exc: PdrouteError) -> int:
    """The HTTP status of a domain error (400 for one not in ``STATUS_BY_ERROR``)."""
    return next((code for cls, code in STATUS_BY_ERROR if isinstance(exc, cls)), 400)


def json_error(
    request: Request,
    status: int,
    message: str,
    detail: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A FastAPI ``Response`` carrying ``app.http.error_body``'s body for ``request``."""
    request_id = request_id_of(request.scope)
    return Response(
        error_body(message, request_id=request_id, detail=detail),
        status_code=status,
        media_type="application/json",
        headers={**(headers or {}), "x-request-id": request_id},
    )


async def _validation_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RequestValidationError):  # registered for this type only
        raise exc
    body = validation_error_body(list(exc.errors()))
    return json_error(request, 422, body["error"], body["detail"])


async def _domain_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, PdrouteError):  # registered for this type only
        raise exc
    return json_error(request, status_for(exc), str(exc), type(exc).__name__)


async def _http_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    return json_error(request, exc.status_code, str(exc.detail), exc.detail, getattr(exc, "headers", None))


async def _server_error_handler(request: Request, exc: Exception) -> Response:
    # Starlette's ServerErrorMiddleware sends this, then re-raises to app.http.envelope's
    # RequestEnvelope, which logs the traceback under the same request id.
    return json_error(request, 500, INTERNAL_ERROR)


async def _disconnect_handler(request: Request, exc: Exception) -> Response:
    # The client went away while its body was being read: nobody to answer, and not a server
    # error (it must not count as a 5xx). 499 is what the metrics record; it is never sent.
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ClientDisconnect, _disconnect_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(PdrouteError, _domain_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(Exception, _server_error_handler)
