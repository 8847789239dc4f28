"""What the client receives: OpenAI-shaped bodies and events, and every error mapped once."""

from __future__ import annotations

import math
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from app.http.errors import describe_validation_errors
from pdroute_proxy.errors import BadRequest, NoEngine, Shed, UpstreamRejected

MAX_RETRY_AFTER_S = 60  # a Retry-After beyond a minute says nothing a client can use


def error_body(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body: a whole answer


def json_answer(body: dict[str, Any], status: int = 200) -> Answer:
    raw = orjson.dumps(body)
    return status, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))], raw


def as_response(answer: Answer) -> Response:
    status, headers, body = answer
    response = Response(body, status_code=status)
    response.raw_headers = headers
    return response


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def completion_chunk(
    request_id: str,
    model: str,
    text: str,
    finish_reason: str | None,
    token_ids: list[int] | None,
    *,
    chat: bool,
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
    if chat:
        choice["delta"] = {"role": "assistant", "content": text}
        obj = "chat.completion.chunk"
    else:
        choice["text"] = text
        obj = "text_completion"
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {"id": request_id, "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def answer_of(exc: Exception) -> Answer:
    """The one mapping of the proxy's errors to HTTP answers."""
    if isinstance(exc, NoEngine):
        return json_answer(error_body(f"no engine can serve this request: {exc}", "no_engine", 503), 503)
    if isinstance(exc, Shed):
        # The predicted lateness is how long the backlog ahead needs to drain: retry after it.
        retry_after = min(MAX_RETRY_AFTER_S, max(1, math.ceil(exc.lateness_ms / 1000.0)))
        status, headers, body = json_answer(error_body(str(exc), "overloaded", 503), 503)
        return status, [*headers, (b"retry-after", str(retry_after).encode())], body
    if isinstance(exc, BadRequest):
        return json_answer(error_body(str(exc), "invalid_request_error", 400, exc.param), 400)
    if isinstance(exc, UpstreamRejected):
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(exc.body))]
        return exc.status, headers, exc.body
    raise exc


def invalid(errors: list[Any]) -> Answer:
    """The 400 of a body that does not validate: the first bad field named in ``param``."""
    first = [str(p) for p in (errors[0].get("loc", ()) if errors else ()) if p != "body"]
    message = describe_validation_errors(errors) if errors else "invalid request"
    return json_answer(error_body(message, "invalid_request_error", 400, ".".join(first) or None), 400)


def stream_error(exc: Exception, num_tokens: int) -> dict[str, Any]:
    """The error event of a stream whose headers (a 200) are out: after ``num_tokens`` tokens,
    or before any (the engine that accepted the request failed, and no other could serve it)."""
    if num_tokens == 0 and isinstance(exc, NoEngine):
        return error_body(f"no engine can serve this request: {exc}", "no_engine", 503)
    if num_tokens == 0 and isinstance(exc, UpstreamRejected):
        return error_body(f"{exc}: {exc.body[:500].decode(errors='replace')}", "upstream_error", exc.status)
    return error_body(f"the answer was cut short: {exc}", "upstream_error", 502)


def install(app: FastAPI) -> None:
    async def validation(request: Request, exc: Exception) -> Response:
        errors = list(exc.errors()) if isinstance(exc, RequestValidationError) else []
        if not errors:
            return as_response(json_answer(error_body(str(exc), "invalid_request_error", 400), 400))
        return as_response(invalid(errors))

    async def proxy_error(request: Request, exc: Exception) -> Response:
        return as_response(answer_of(exc))

    app.add_exception_handler(RequestValidationError, validation)
    for kind in (NoEngine, Shed, BadRequest, UpstreamRejected):
        app.add_exception_handler(kind, proxy_error)
