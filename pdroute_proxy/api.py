"""The OpenAI-compatible endpoints: parse, serve through the relay, answer (pure ASGI).

``/v1/completions`` takes token ids, or text when the engines have a tokenizer (their
``/tokenize``); ``/v1/chat/completions`` needs one. Streamed answers are SSE events, one per
token. A streamed answer's headers (200) go out as soon as an engine has accepted the request
(``relay.ACCEPTED``), so that the client reads them while the engine prefills; until then
every failure is still an HTTP status (a 503 when no engine can serve, an engine's own 4xx),
after it an error event ends the stream. A client that disconnects cancels the upstream
requests: the request's task is cancelled (``DisconnectWatch``).

``Completions`` answers both POSTs ahead of FastAPI: a speed exception, kept because it pays
(FastAPI's routing, dependency solving and exception middleware ran before every upstream call,
and Starlette's streaming response starts a task group per request and wraps every event's
send; without them, and with the prefill-rate window's kept sum, the proxy's own time to its
first event fell from 0.26 to 0.14 ms in process: docs/proxy.md "Overhead"). FastAPI still has
the paths (``router``), so that other methods answer 405 and the OpenAPI schema documents
their bodies.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pdroute_proxy import responses
from pdroute_proxy.errors import BadRequest, NoEngine, ProxyError
from pdroute_proxy.observe import Observer
from pdroute_proxy.relay import ACCEPTED, Job, Piece, Relay
from pdroute_proxy.schemas import ChatRequest, CompletionRequest
from pdroute_proxy.tokenize import Tokenizer
from pdroute_proxy.upstream import UpstreamError

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
SSE_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
}

router = APIRouter()


@router.post(COMPLETIONS, response_model=None)
async def completions(body: CompletionRequest) -> None:
    """A completion of token ids or text (answered by ``Completions``, ahead of the router)."""
    raise RuntimeError(f"POST {COMPLETIONS} reached the router: Completions answers it")


@router.post(CHAT, response_model=None)
async def chat_completions(body: ChatRequest) -> None:
    """A chat completion (answered by ``Completions``, ahead of the router)."""
    raise RuntimeError(f"POST {CHAT} reached the router: Completions answers it")


class DisconnectWatch:
    """Cancels ``task`` when the client disconnects (the server delivers ``http.disconnect``).

    One task per request; ``stop`` before the answer's last message is sent, since the server
    reports a finished answer as a disconnect too."""

    def __init__(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        self.receive = receive
        self.task = task
        self.is_gone = False
        self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        try:
            while True:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    self.is_gone = True
                    self.task.cancel()
                    return
        except asyncio.CancelledError:
            # Stopped: end quietly. A task ended by its cancellation keeps the error, whose
            # traceback holds this frame and so this task: a cycle per request for the collector.
            return

    def stop(self) -> None:
        self.watcher.cancel()


class Completions:
    """``POST /v1/completions`` and ``POST /v1/chat/completions`` in front of ``app``."""

    def __init__(self, app: ASGIApp, relay: Relay, tokenizer: Tokenizer, observer: Observer) -> None:
        self.app = app
        self.relay = relay
        self.tokenizer = tokenizer
        self.observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path in (COMPLETIONS, CHAT):
                await self._answer(path == CHAT, receive, send)
                return
        await self.app(scope, receive, send)

    async def _answer(self, chat: bool, receive: Receive, send: Send) -> None:
        raw = await _read_body(receive)
        if raw is None:
            return  # the client went away
        endpoint = "chat" if chat else "completions"
        body: CompletionRequest | ChatRequest
        try:
            body = (ChatRequest if chat else CompletionRequest).model_validate_json(raw)
        except ValidationError as exc:
            await _send_answer(send, responses.invalid(list(exc.errors(include_url=False))))
            return
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Completions runs in a task")
        watch = DisconnectWatch(receive, task)
        try:
            await self._serve(body, chat, endpoint, send, watch)
        except asyncio.CancelledError:
            if not watch.is_gone:
                raise
            task.uncancel()  # the client left: answered (nothing), the request counted
        finally:
            watch.stop()

    async def _serve(
        self,
        body: CompletionRequest | ChatRequest,
        chat: bool,
        endpoint: str,
        send: Send,
        watch: DisconnectWatch,
    ) -> None:
        try:
            if isinstance(body, ChatRequest):
                prompt = await self.tokenizer.chat(body.messages)
                max_tokens = body.output_limit()
            else:
                given = body.prompt
                prompt = given if isinstance(given, list) else await self.tokenizer.text(given)
                max_tokens = body.max_tokens
        except ProxyError as exc:
            self.observer.count(endpoint, exc)
            await _send_answer(send, responses.answer_of(exc))
            return
        except asyncio.CancelledError as exc:
            self.observer.count(endpoint, exc)
            raise
        fields = body.passthrough()
        fields.pop("messages", None)
        fields.pop("max_completion_tokens", None)
        job = Job(prompt, max_tokens, fields)
        pieces = self.relay.serve(job)
        answer = _Answer(job, endpoint, f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", body, chat)
        try:
            try:
                first = await anext(pieces)  # before any byte: a 503 or a 4xx is still an HTTP status
            except StopAsyncIteration:
                first = None
            except (ProxyError, UpstreamError) as exc:  # shed, or no engine: counted and recorded
                self.observer.finish(job, endpoint, 0, exc)
                error = NoEngine(str(exc)) if isinstance(exc, UpstreamError) else exc
                await _send_answer(send, responses.answer_of(error))
                return
            if body.stream:
                await self._stream(pieces, first, answer, send, watch)
            else:
                await self._whole(pieces, first, answer, send, watch)
        except BaseException as exc:  # cancelled (the client left) or unexpected: counted
            if not answer.is_finished:
                self.observer.finish(job, endpoint, answer.num_tokens, exc)
            raise
        finally:
            await pieces.aclose()  # a no-op once it is done; else closes the upstream requests

    async def _stream(
        self,
        pieces: AsyncGenerator[Piece, None],
        first: Piece | None,
        answer: _Answer,
        send: Send,
        watch: DisconnectWatch,
    ) -> None:
        await send(SSE_START)
        outcome: Exception | None = None
        piece = first
        try:
            while piece is not None:
                if piece is not ACCEPTED:  # the headers are out: nothing to send until a token
                    answer.num_tokens += len(piece.token_ids)
                    await send({"type": "http.response.body", "body": answer.event(piece), "more_body": True})
                piece = await anext(pieces, None)
        except (ProxyError, UpstreamError) as exc:
            outcome = exc
            error = responses.stream_error(exc, answer.num_tokens)
            await send({"type": "http.response.body", "body": responses.sse(error), "more_body": True})
        tail = responses.DONE
        if answer.body.include_usage:
            tail = responses.sse(answer.usage_event()) + tail
        watch.stop()
        answer.is_finished = True
        self.observer.finish(answer.job, answer.endpoint, answer.num_tokens, outcome)
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _whole(
        self,
        pieces: AsyncGenerator[Piece, None],
        first: Piece | None,
        answer: _Answer,
        send: Send,
        watch: DisconnectWatch,
    ) -> None:
        got = [] if first is None else [first]
        try:
            async for piece in pieces:
                got.append(piece)
        except (ProxyError, UpstreamError) as exc:
            watch.stop()
            answer.is_finished = True
            self.observer.finish(answer.job, answer.endpoint, 0, exc)
            await _send_answer(send, responses.answer_of(NoEngine(str(exc))))
            return
        watch.stop()
        ids = [t for p in got for t in p.token_ids]
        answer.is_finished = True
        self.observer.finish(answer.job, answer.endpoint, len(ids), None)
        await _send_answer(send, responses.json_answer(answer.whole(got, ids)))


class _Answer:
    """One request's answer as it is sent: its id, what it echoes, the tokens sent so far."""

    def __init__(
        self, job: Job, endpoint: str, request_id: str, body: CompletionRequest | ChatRequest, chat: bool
    ) -> None:
        self.job = job
        self.endpoint = endpoint
        self.request_id = request_id
        self.body = body
        self.model = body.model or ""
        self.with_ids = bool(body.return_token_ids)
        self.chat = chat
        self.num_tokens = 0
        self.is_finished = False  # counted and observed

    def event(self, piece: Piece) -> bytes:
        ids = list(piece.token_ids) if self.with_ids else None
        chunk = responses.completion_chunk(
            self.request_id, self.model, piece.text, piece.finish_reason, ids, chat=self.chat
        )
        return responses.sse(chunk)

    def usage_event(self) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": "text_completion",
            "model": self.model,
            "choices": [],
            "usage": responses.usage(len(self.job.prompt), self.num_tokens),
        }

    def whole(self, got: list[Piece], ids: list[int]) -> dict[str, Any]:
        text = "".join(p.text for p in got)
        finish = next((p.finish_reason for p in reversed(got) if p.finish_reason is not None), None)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        if self.with_ids:
            choice["token_ids"] = ids
        return {
            "id": self.request_id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": responses.usage(len(self.job.prompt), len(ids)),
        }


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (None: the client went away first)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send_answer(send: Send, answer: responses.Answer) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["CHAT", "COMPLETIONS", "BadRequest", "Completions", "router"]
