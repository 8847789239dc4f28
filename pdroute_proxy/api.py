"""The OpenAI-compatible endpoints: parse (pydantic), serve through the relay, answer.

``/v1/completions`` takes token ids, or text when the engines have a tokenizer (their
``/tokenize``); ``/v1/chat/completions`` needs one. Streamed answers are SSE events, one per
token; a client that disconnects cancels the upstream requests (a streamed answer's generator
is cancelled by Starlette; a whole answer is watched for the disconnect here).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from pdroute_proxy import responses
from pdroute_proxy.errors import BadRequest, NoEngine, ProxyError
from pdroute_proxy.observe import Observer
from pdroute_proxy.relay import Job, Piece, Relay
from pdroute_proxy.schemas import ChatRequest, CompletionRequest
from pdroute_proxy.tokenize import Tokenizer
from pdroute_proxy.upstream import UpstreamError

router = APIRouter()


def _services(request: Request) -> tuple[Relay, Tokenizer, Observer]:
    state = request.app.state
    return state.relay, state.tokenizer, state.observer


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    relay, tokenizer, observer = _services(request)
    try:
        prompt = body.prompt if isinstance(body.prompt, list) else await tokenizer.text(body.prompt)
    except ProxyError as exc:
        observer.count("completions", exc)
        raise
    return await _serve(request, relay, observer, body, prompt, body.max_tokens, chat=False)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, request: Request) -> Response:
    relay, tokenizer, observer = _services(request)
    try:
        prompt = await tokenizer.chat(body.messages)
    except ProxyError as exc:
        observer.count("chat", exc)
        raise
    return await _serve(request, relay, observer, body, prompt, body.output_limit(), chat=True)


async def _serve(
    request: Request,
    relay: Relay,
    observer: Observer,
    body: CompletionRequest | ChatRequest,
    prompt: list[int],
    max_tokens: int,
    *,
    chat: bool,
) -> Response:
    fields = body.passthrough()
    fields.pop("messages", None)
    fields.pop("max_completion_tokens", None)
    job = Job(prompt, max_tokens, fields)
    request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    model = body.model or ""
    endpoint = "chat" if chat else "completions"
    pieces = relay.serve(job)
    with_ids = bool(body.return_token_ids)
    try:
        first = await anext(pieces)  # before any byte: a 503 or a 4xx is still an HTTP status
    except StopAsyncIteration:
        first = None
    except (ProxyError, UpstreamError) as exc:
        observer.count(endpoint, exc)
        if isinstance(exc, UpstreamError):
            raise NoEngine(str(exc)) from None
        raise
    if body.stream:
        return StreamingResponse(
            _events(
                pieces, first, job, observer, request_id, model, with_ids, body.include_usage, endpoint, chat
            ),
            media_type="text/event-stream",
        )
    return await _whole(request, pieces, first, job, observer, request_id, model, with_ids, endpoint, chat)


async def _events(
    pieces: AsyncIterator[Piece],
    first: Piece | None,
    job: Job,
    observer: Observer,
    request_id: str,
    model: str,
    with_ids: bool,
    include_usage: bool,
    endpoint: str,
    chat: bool,
) -> AsyncIterator[bytes]:
    count = 0
    outcome: Exception | None = None
    try:
        piece = first
        while piece is not None:
            count += len(piece.token_ids)
            ids = list(piece.token_ids) if with_ids else None
            yield responses.sse(
                responses.completion_chunk(request_id, model, piece.text, piece.finish_reason, ids, chat=chat)
            )
            piece = await anext(pieces, None)
    except (ProxyError, UpstreamError) as exc:
        outcome = exc
        yield responses.sse(responses.error_body(f"the answer was cut short: {exc}", "upstream_error", 502))
    except BaseException as exc:  # the client went away (cancelled): the upstream requests close
        observer.finish(job, endpoint, count, exc)
        raise
    if include_usage:
        yield responses.sse(
            {
                "id": request_id,
                "object": "text_completion",
                "model": model,
                "choices": [],
                "usage": responses.usage(len(job.prompt), count),
            }
        )
    yield responses.DONE
    observer.finish(job, endpoint, count, outcome)


async def _whole(
    request: Request,
    pieces: AsyncGenerator[Piece, None],
    first: Piece | None,
    job: Job,
    observer: Observer,
    request_id: str,
    model: str,
    with_ids: bool,
    endpoint: str,
    chat: bool,
) -> Response:
    async def collect() -> list[Piece]:
        got = [] if first is None else [first]
        async for piece in pieces:
            got.append(piece)
        return got

    collecting = asyncio.ensure_future(collect())
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((collecting, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
    if not collecting.done():  # the client left: cancelling closes the upstream requests
        collecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collecting
        await pieces.aclose()
        observer.finish(job, endpoint, 0, asyncio.CancelledError())
        return Response(status_code=499)
    try:
        got = collecting.result()
    except (ProxyError, UpstreamError) as exc:
        observer.finish(job, endpoint, 0, exc)
        raise NoEngine(str(exc)) from None
    ids = [t for p in got for t in p.token_ids]
    text = "".join(p.text for p in got)
    finish = next((p.finish_reason for p in reversed(got) if p.finish_reason is not None), None)
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if with_ids:
        choice["token_ids"] = ids
    observer.finish(job, endpoint, len(ids), None)
    return responses.json_response(
        {
            "id": request_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": responses.usage(len(job.prompt), len(ids)),
        }
    )


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (the body is already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


__all__ = ["BadRequest", "router"]
