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

import aiohttp
import orjson
from aiohttp.http_exceptions import HttpProcessingError

MAX_ERROR_BODY_BYTES = 65_536
READ_BUFFER_BYTES = 1 << 24  # the longest event line read (16 MiB)
CAUSES = ("connect", "timeout", "http_5xx", "http_4xx", "closed", "protocol")
_JSON = {"content-type": "application/json"}


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


def timeouts(read_s: float, connect_s: float) -> aiohttp.ClientTimeout:
    """``connect_s`` to open a connection, ``read_s`` of silence at most between two reads."""
    return aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_s, sock_read=read_s)


def session(limit: int = 4096, line_bytes: int = READ_BUFFER_BYTES) -> aiohttp.ClientSession:
    """The proxy's connections to the engines (opened in its lifespan, on the running loop).

    aiohttp rather than httpx on this path: its C parser adds about 0.1 ms to a streamed first
    token over a raw socket where httpx adds about 0.5 ms (docs/proxy.md, "Overhead"). Lines
    up to ``line_bytes``: an event with many tokens' logprobs stays one line."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0),
        read_bufsize=line_bytes,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


def _transport_error(exc: Exception) -> UpstreamError:
    if isinstance(exc, HttpProcessingError):  # e.g. a line longer than the read buffer
        return UpstreamError("protocol", f"a malformed answer: {type(exc).__name__}")
    if isinstance(exc, TimeoutError):  # aiohttp's own timeouts are TimeoutErrors too
        return UpstreamError("timeout", f"no answer in time ({type(exc).__name__})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError("connect", f"cannot connect: {exc}")
    return UpstreamError("closed", f"connection lost: {type(exc).__name__}: {exc}")


# What a call can raise besides UpstreamError: the transport's errors and its timeouts, and the
# parser's (a line longer than the read buffer is aiohttp's LineTooLong, not a ClientError).
_TRANSPORT = (aiohttp.ClientError, TimeoutError, HttpProcessingError)


async def stream(
    client: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    timeout: aiohttp.ClientTimeout,
    *,
    announce: bool = False,
) -> AsyncIterator[Event]:
    """Stream ``body`` (a completion request; ``stream`` and ``return_token_ids`` are set here)
    from ``base_url``: its events until ``[DONE]``, after ``OPENED`` when ``announce``. Raises
    ``UpstreamError`` on any failure, including a stream that ends without ``[DONE]`` (the
    engine died mid-answer)."""
    payload = {**body, "stream": True, "return_token_ids": True}
    payload["stream_options"] = {"include_usage": True}
    try:
        async with client.post(
            f"{base_url}/v1/completions", data=orjson.dumps(payload), timeout=timeout, headers=_JSON
        ) as response:
            if response.status != 200:
                raise _status_error(response.status, await _error_body(response))
            if announce:
                yield OPENED
            is_done = False
            async for line in response.content:  # read to the end: the connection is then reused
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
    except UpstreamError:
        raise
    except _TRANSPORT as exc:
        raise _transport_error(exc) from None
    if not is_done:
        raise UpstreamError("closed", "the stream ended without [DONE]")


async def post_json(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout: aiohttp.ClientTimeout
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return its JSON object (``UpstreamError`` otherwise)."""
    try:
        async with client.post(url, data=orjson.dumps(body), timeout=timeout, headers=_JSON) as response:
            return _json_object(response.status, await response.read())
    except _TRANSPORT as exc:
        raise _transport_error(exc) from None


async def get_json(client: aiohttp.ClientSession, url: str, timeout: aiohttp.ClientTimeout) -> dict[str, Any]:
    """GET ``url``'s JSON object (``UpstreamError`` otherwise)."""
    try:
        async with client.get(url, timeout=timeout) as response:
            return _json_object(response.status, await response.read())
    except _TRANSPORT as exc:
        raise _transport_error(exc) from None


def _status_error(status: int, body: bytes) -> UpstreamError:
    """The failure of an answer with HTTP ``status`` other than 200, keeping its ``body``."""
    return UpstreamError("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}", status, body)


async def _error_body(response: aiohttp.ClientResponse) -> bytes:
    """An error answer's body, its first ``MAX_ERROR_BODY_BYTES`` (``read(n)`` returns what has
    arrived, so it is read until the end or the limit)."""
    body = bytearray()
    while len(body) < MAX_ERROR_BODY_BYTES:
        chunk = await response.content.read(MAX_ERROR_BODY_BYTES - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def _json_object(status: int, content: bytes) -> dict[str, Any]:
    """A 200 answer's JSON object, or the ``UpstreamError`` that says what it was instead."""
    if status != 200:
        raise _status_error(status, content)
    try:
        parsed = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise UpstreamError("protocol", "an answer that is not JSON") from None
    if not isinstance(parsed, dict):
        raise UpstreamError("protocol", "an answer that is not an object")
    return parsed
