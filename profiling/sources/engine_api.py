"""A live engine's OpenAI-compatible API, as the live-engine profile and the real-engine tests use it.

httpx only (no torch). Prompts are token ids on ``/v1/completions`` with ``ignore_eos`` (the
engine generates exactly ``max_tokens``) and ``return_token_ids``; ``stream: true`` gives one
server-sent event per token, whose arrival times (monotonic seconds) are the measurement.

The KV hand-off of a prefill/decode pair on vLLM's ``ExampleConnector`` (``handoff``): the
prefill engine runs the prompt with ``max_tokens: 1``, then the decode engine gets the prompt
plus that first token, which finds the prompt's KV blocks in the shared folder. When the
prompt is a multiple of the block size the bare prompt is sent instead (the connector would
look for one block more than the prefill engine saved). The decode engine loads every whole
block before the last token of what it is sent: ``external_tokens`` tokens.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pdroute_core.errors import PdrouteError

Labels = Mapping[str, str]
Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value)


class EngineAPIError(PdrouteError):
    """The engine is down, not OpenAI-compatible, or has no usable metrics (one line)."""


@dataclass(frozen=True)
class EngineInfo:
    """What an engine says about itself."""

    url: str  # base URL, no trailing slash
    model: str  # the first served model id
    version: str | None  # GET /version, when it answers
    max_model_len: int | None
    cache_config: dict[str, str] = field(default_factory=dict)  # vllm:cache_config_info labels
    kind: str = "unknown"  # "vllm" when it publishes vllm:* metrics

    @property
    def block_size(self) -> int | None:
        return _int_or_none(self.cache_config.get("block_size"))

    @property
    def kv_capacity_tokens(self) -> int | None:
        """KV-cache tokens the engine holds: ``num_gpu_blocks x block_size`` of its
        ``cache_config_info`` (vLLM's figure after weights and activations), else the pool's
        ``kv_cache_size_tokens``; None when it publishes neither."""
        blocks, block = _int_or_none(self.cache_config.get("num_gpu_blocks")), self.block_size
        if blocks is not None and block is not None and blocks > 0 and block > 0:
            return blocks * block
        tokens = _int_or_none(self.cache_config.get("kv_cache_size_tokens"))
        return tokens if tokens is not None and tokens > 0 else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        """KV pool bytes / KV pool tokens, from ``cache_config_info`` (None when not published)."""
        size = _int_or_none(self.cache_config.get("kv_cache_memory_bytes"))
        tokens = _int_or_none(self.cache_config.get("kv_cache_size_tokens"))
        if size is None or tokens is None or tokens < 1:
            return None
        return size // tokens


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_metrics(text: str) -> Samples:
    """Prometheus text -> every sample by name (``prometheus_client``'s parser)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def metric_sum(samples: Samples, name: str, **labels: str) -> float | None:
    """Sum of the samples of ``name`` whose labels include ``labels``; None when there is none."""
    rows = [v for ls, v in samples.get(name, []) if all(ls.get(k) == want for k, want in labels.items())]
    return sum(rows) if rows else None


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    try:
        return await client.get(url)
    except httpx.TimeoutException:
        raise EngineAPIError(f"{url}: timed out") from None
    except httpx.HTTPError as exc:
        raise EngineAPIError(f"{url}: engine is down or unreachable ({type(exc).__name__})") from None


async def read_metrics(client: httpx.AsyncClient, url: str) -> Samples:
    resp = await _get(client, f"{url}/metrics")
    if resp.status_code != 200:
        raise EngineAPIError(f"{url}/metrics: no metrics (HTTP {resp.status_code})")
    try:
        samples = parse_metrics(resp.text)
    except ValueError as exc:
        raise EngineAPIError(f"{url}/metrics: not Prometheus text ({exc})") from None
    if not samples:
        raise EngineAPIError(f"{url}/metrics: no metrics published")
    return samples


async def discover(client: httpx.AsyncClient, url: str) -> EngineInfo:
    """The engine's model, version and cache config; ``EngineAPIError`` naming what is wrong."""
    url = url.rstrip("/")
    resp = await _get(client, f"{url}/v1/models")
    try:
        models = resp.json()["data"] if resp.status_code == 200 else None
        model_id = str(models[0]["id"]) if models else None
    except (ValueError, KeyError, TypeError, IndexError):
        model_id, models = None, None
    if model_id is None or not models:
        raise EngineAPIError(
            f"{url}: not an OpenAI-compatible engine (GET /v1/models answered HTTP {resp.status_code} "
            "without a model list)"
        )
    max_len = models[0].get("max_model_len")
    version = None
    version_resp = await _get(client, f"{url}/version")
    if version_resp.status_code == 200:
        try:
            version = str(version_resp.json()["version"])
        except (ValueError, KeyError, TypeError):
            version = None
    samples = await read_metrics(client, url)
    config = samples.get("vllm:cache_config_info", [])
    kind = "vllm" if any(name.startswith("vllm:") for name in samples) else "unknown"
    return EngineInfo(
        url=url,
        model=model_id,
        version=version,
        max_model_len=max_len if isinstance(max_len, int) else None,
        cache_config=dict(config[0][0]) if config else {},
        kind=kind,
    )


def fresh_prompt(rng: random.Random, num_tokens: int, vocab_size: int = 32000) -> list[int]:
    """Random token ids (never a cached prefix of an earlier prompt, in practice)."""
    return [rng.randrange(3, vocab_size) for _ in range(num_tokens)]


@dataclass(frozen=True)
class Stream:
    """One streamed completion: when it was sent and when each token arrived (monotonic s)."""

    sent_at: float
    token_times: tuple[float, ...]
    token_ids: tuple[int, ...]

    @property
    def ttft_ms(self) -> float:
        if not self.token_times:
            raise EngineAPIError("the engine streamed no token")
        return (self.token_times[0] - self.sent_at) * 1e3

    def gaps_ms(self, after: float = float("-inf")) -> list[float]:
        """Inter-token times (ms) of the tokens that arrived after ``after``."""
        t = self.token_times
        return [(t[i] - t[i - 1]) * 1e3 for i in range(1, len(t)) if t[i] > after]


def completion_body(model: str, prompt: Sequence[int], max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    prompt: Sequence[int],
    max_tokens: int,
    *,
    extra: Mapping[str, Any] | None = None,
    times: list[float] | None = None,
) -> Stream:
    """Stream a completion; every event's arrival time, one per event that carries tokens.

    ``times`` (optional) receives the arrival times as they come, so that a caller that
    cancels the stream still has them.
    """
    body = {**completion_body(model, prompt, max_tokens, stream=True), **(extra or {})}
    times = [] if times is None else times
    ids: list[int] = []
    sent = time.monotonic()
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:200]
                raise EngineAPIError(f"{url}/v1/completions: HTTP {resp.status_code}: {detail}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.monotonic()
                event = json.loads(line[6:])
                if not event.get("choices"):  # vLLM reports a failure mid-stream as an error event
                    raise EngineAPIError(f"{url}/v1/completions: the stream failed: {line[6:206]}")
                choice = event["choices"][0]
                new = choice.get("token_ids") or []
                if new or choice.get("text"):
                    times.append(now)
                    ids.extend(int(i) for i in new)
    except httpx.HTTPError as exc:
        raise EngineAPIError(f"{url}/v1/completions: {type(exc).__name__}: {exc}") from None
    return Stream(sent, tuple(times), tuple(ids))


async def complete(
    client: httpx.AsyncClient, url: str, model: str, prompt: Sequence[int], max_tokens: int
) -> dict[str, Any]:
    """A non-streamed completion's JSON answer."""
    try:
        resp = await client.post(
            f"{url}/v1/completions", json=completion_body(model, prompt, max_tokens, False)
        )
    except httpx.HTTPError as exc:
        raise EngineAPIError(f"{url}/v1/completions: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise EngineAPIError(f"{url}/v1/completions: HTTP {resp.status_code}: {resp.text[:200]}")
    answer: dict[str, Any] = resp.json()
    return answer


def handoff_prompt(prompt: Sequence[int], first_token: int, block_size: int) -> list[int]:
    """What the decode engine is sent after the prefill engine's first token (module docstring)."""
    return list(prompt) if len(prompt) % block_size == 0 else [*prompt, first_token]


def external_tokens(decode_prompt_len: int, block_size: int) -> int:
    """Tokens the decode engine loads over the connector: whole blocks before the last token."""
    return (decode_prompt_len - 1) // block_size * block_size


@dataclass(frozen=True)
class Handoff:
    """A disaggregated request: the prefill engine's stream, then the decode engine's."""

    prefill: Stream
    decode: Stream
    decode_prompt_len: int

    @property
    def ttft_at_decode_ms(self) -> float:
        """From sending to the prefill engine to the decode engine's first token (ms)."""
        if not self.decode.token_times:
            raise EngineAPIError("the decode engine streamed no token")
        return (self.decode.token_times[0] - self.prefill.sent_at) * 1e3


async def handoff(
    client: httpx.AsyncClient,
    prefill_url: str,
    decode_url: str,
    model: str,
    prompt: Sequence[int],
    max_tokens: int,
    block_size: int,
) -> Handoff:
    """Prefill on one engine, decode on the other (``max_tokens`` from the decode engine)."""
    first = await stream_completion(client, prefill_url, model, prompt, 1)
    if not first.token_ids:
        raise EngineAPIError(f"{prefill_url}: the prefill engine returned no token id")
    decode_prompt = handoff_prompt(prompt, first.token_ids[0], block_size)
    decode = await stream_completion(client, decode_url, model, decode_prompt, max_tokens)
    return Handoff(first, decode, len(decode_prompt))


async def gather_streams(
    client: httpx.AsyncClient, url: str, model: str, prompts: Sequence[Sequence[int]], max_tokens: int
) -> list[Stream]:
    """Stream several completions at once."""
    return list(
        await asyncio.gather(*(stream_completion(client, url, model, p, max_tokens) for p in prompts))
    )
