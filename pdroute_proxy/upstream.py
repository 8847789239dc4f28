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

import httpx
import orjson

MAX_ERROR_BODY_BYTES = 65_536
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


def _transport_error(exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamError("timeout", f"no answer in time ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamError("connect", f"cannot connect: {exc}")
    return UpstreamError("closed", f"connection lost: {type(exc).__name__}: {exc}")


async def stream(
    client: httpx.AsyncClient, base_url: str, body: dict[str, Any], timeout: httpx.Timeout
) -> AsyncIterator[Event]:
    """Stream ``body`` (a completion request; ``stream`` and ``return_token_ids`` are set here)
    from ``base_url``: its events until ``[DONE]``. Raises ``UpstreamError`` on any failure,
    including a stream that ends without ``[DONE]`` (the engine died mid-answer)."""
    payload = {**body, "stream": True, "return_token_ids": True}
    payload["stream_options"] = {"include_usage": True}
    try:
        async with client.stream(
            "POST",
            f"{base_url}/v1/completions",
            content=orjson.dumps(payload),
            timeout=timeout,
            headers={"content-type": "application/json"},
        ) as response:
            if response.status_code != 200:
                chunks = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    chunks.append(chunk)
                    if size > MAX_ERROR_BODY_BYTES:
                        break
                cause = "http_5xx" if response.status_code >= 500 else "http_4xx"
                raise UpstreamError(
                    cause, f"HTTP {response.status_code}", response.status_code, b"".join(chunks)
                )
            is_done = False
            async for line in response.aiter_lines():  # read to the end: the connection is then reused
                if is_done or not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
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
    except httpx.TransportError as exc:
        raise _transport_error(exc) from None
    if not is_done:
        raise UpstreamError("closed", "the stream ended without [DONE]")


async def post_json(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: httpx.Timeout
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return its JSON object (``UpstreamError`` otherwise)."""
    try:
        response = await client.post(
            url, content=orjson.dumps(body), timeout=timeout, headers={"content-type": "application/json"}
        )
    except httpx.TransportError as exc:
        raise _transport_error(exc) from None
    return _json_object(response)


async def get_json(client: httpx.AsyncClient, url: str, timeout: httpx.Timeout) -> dict[str, Any]:
    """GET ``url``'s JSON object (``UpstreamError`` otherwise)."""
    try:
        response = await client.get(url, timeout=timeout)
    except httpx.TransportError as exc:
        raise _transport_error(exc) from None
    return _json_object(response)


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """A 200 answer's JSON object, or the ``UpstreamError`` that says what it was instead."""
    if response.status_code != 200:
        cause = "http_5xx" if response.status_code >= 500 else "http_4xx"
        raise UpstreamError(cause, f"HTTP {response.status_code}", response.status_code, response.content)
    try:
        parsed = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise UpstreamError("protocol", "an answer that is not JSON") from None
    if not isinstance(parsed, dict):
        raise UpstreamError("protocol", "an answer that is not an object")
    return parsed
