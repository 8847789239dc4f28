"""The calls the proxy makes to an engine's OpenAI API, and how each can fail.

Every call is ``/v1/completions`` with token ids, streamed (``stream: true``: one event per
token on vLLM, which times each token and lets a client's disconnect close the upstream
request), with ``return_token_ids`` so that a stream cut short can be resumed elsewhere from
the tokens already produced. ``UpstreamError.cause`` is a bounded metric label.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from pdroute_proxy.http1 import EngineClient, Timeouts, TransportError

MAX_ERROR_BODY_BYTES = 65_536
READ_BUFFER_BYTES = 1 << 24  # the longest event line read (16 MiB)
CAUSES = ("connect", "timeout", "http_5xx", "http_4xx", "closed", "protocol")


class UpstreamError(Exception):
    """A call to one engine failed; ``cause`` is one of ``CAUSES``."""

    def __init__(self, cause: str, message: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.cause = cause
        self.status = status
        self.body = body


def api_base(metrics_url: str) -> str:
    """The engine's API root from its ``/metrics`` URL (vLLM serves both on one port)."""
    base = metrics_url.rstrip("/")
    return base.removesuffix("/metrics")


@dataclass(frozen=True)
class Event:
    """One streamed completion event of choice 0: its new tokens, text and finish reason."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None
    raw: dict[str, Any]  # the whole event (kv_transfer_params, usage, logprobs, ...)


# What ``stream(..., announce=True)`` yields first, once the engine has answered 200 (before its
# first event): the request is accepted, its answer will be a stream.
OPENED = Event((), "", None, {})


def _event(data: dict[str, Any]) -> Event:
    choices = data.get("choices") or []
    if not choices:  # the usage event at the end of a stream
        return Event((), "", None, data)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise UpstreamError("protocol", "a choice that is not an object")
    ids = choice.get("token_ids") or ()
    if not isinstance(ids, list | tuple) or not all(isinstance(t, int) for t in ids):
        raise UpstreamError("protocol", "token_ids that are not integers")
    text = choice.get("text")
    return Event(tuple(ids), text if isinstance(text, str) else "", choice.get("finish_reason"), data)


def timeouts(read_s: float, connect_s: float) -> Timeouts:
    """``connect_s`` to open a connection, ``read_s`` of silence at most between two reads."""
    return Timeouts(read_s=read_s, connect_s=connect_s)


def session(limit: int = 64, line_bytes: int = READ_BUFFER_BYTES) -> EngineClient:
    """The proxy's connections to the engines (opened in its lifespan, on the running loop):
    one per call in flight, ``limit`` at most kept alive per engine between calls, lines up to
    ``line_bytes`` (an event with many tokens' logprobs stays one line).
    ``pdroute_proxy.http1`` says why not aiohttp."""
    return EngineClient(max_line=line_bytes, limit_idle=limit)


async def stream(
    client: EngineClient,
    base_url: str,
    body: dict[str, Any],
    timeout: Timeouts,
    *,
    announce: bool = False,
) -> AsyncIterator[Event]:
    """Stream ``body`` (a completion request; ``stream`` and ``return_token_ids`` are set here)
    from ``base_url``: its events until ``[DONE]``, after ``OPENED`` when ``announce``. Raises
    ``UpstreamError`` on any failure, including a stream that ends without ``[DONE]`` (the
    engine died mid-answer)."""
    payload = {**body, "stream": True, "return_token_ids": True}
    payload["stream_options"] = {"include_usage": True}
    is_done = False
    try:
        response = await client.open("POST", f"{base_url}/v1/completions", orjson.dumps(payload), timeout)
        async with response:
            if response.status != 200:
                raise _status_error(response.status, await response.read(MAX_ERROR_BODY_BYTES))
            if announce:
                yield OPENED
            async for line in response.lines():  # read to the end: the connection is then reused
                if is_done or not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    is_done = True
                    continue
                try:
                    parsed = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise UpstreamError("protocol", "an event that is not JSON") from None
                if not isinstance(parsed, dict):
                    raise UpstreamError("protocol", "an event that is not an object")
                if "error" in parsed and "choices" not in parsed:
                    raise UpstreamError("http_5xx", f"error event: {str(parsed['error'])[:200]}")
                yield _event(parsed)
    except TransportError as exc:
        raise UpstreamError(exc.cause, str(exc)) from None
    if not is_done:
        raise UpstreamError("closed", "the stream ended without [DONE]")


async def post_json(
    client: EngineClient, url: str, body: dict[str, Any], timeout: Timeouts
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return its JSON object (``UpstreamError`` otherwise)."""
    return await _call(client, "POST", url, orjson.dumps(body), timeout)


async def get_json(client: EngineClient, url: str, timeout: Timeouts) -> dict[str, Any]:
    """GET ``url``'s JSON object (``UpstreamError`` otherwise)."""
    return await _call(client, "GET", url, None, timeout)


async def _call(
    client: EngineClient, method: str, url: str, body: bytes | None, timeout: Timeouts
) -> dict[str, Any]:
    try:
        response = await client.open(method, url, body, timeout)
        async with response:
            if response.status != 200:
                raise _status_error(response.status, await response.read(MAX_ERROR_BODY_BYTES))
            return _json_object(await response.read())
    except TransportError as exc:
        raise UpstreamError(exc.cause, str(exc)) from None


def _status_error(status: int, body: bytes) -> UpstreamError:
    """The failure of an answer with HTTP ``status`` other than 200, keeping its ``body``."""
    return UpstreamError("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}", status, body)


def _json_object(content: bytes) -> dict[str, Any]:
    """A 200 answer's JSON object, or the ``UpstreamError`` that says what it was instead."""
    try:
        parsed = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise UpstreamError("protocol", "an answer that is not JSON") from None
    if not isinstance(parsed, dict):
        raise UpstreamError("protocol", "an answer that is not an object")
    return parsed
