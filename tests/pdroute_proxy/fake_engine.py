"""A small OpenAI-compatible engine on 127.0.0.1 (real uvicorn in a thread) for the proxy's tests.

It speaks what the proxy uses of vLLM: ``/v1/completions`` with token ids (streamed, one event
per token, ``return_token_ids``, the usage event, ``[DONE]``; or whole), the NixlConnector's
``kv_transfer_params`` round trip, ``/tokenize`` (when given a tokenizer), ``/v1/models`` and a
vLLM-shaped ``/metrics`` of its own running and waiting requests. Its tokens are a function of
the whole sequence so far (``next_token``), so a continuation from prompt + first token gives
the same tokens as a collocated run: tests compare outputs exactly. Faults can be switched on
while it runs: an HTTP status, a hang, dying after N tokens mid-stream, being stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.app.conftest import free_port

MODEL = "fake-model"


def next_token(sequence: list[int]) -> int:
    return (sum(sequence) * 31 + len(sequence) * 7) % 32000


@dataclass
class Faults:
    status: int | None = None  # answer every completion with this HTTP status
    hang_s: float = 0.0  # wait this long before answering a completion
    die_after_tokens: int | None = None  # cut the stream (no [DONE]) after this many tokens
    decode_status_with_kv: int | None = None  # answer a request carrying KV params with this status


@dataclass
class FakeEngine:
    name: str
    token_delay_s: float = 0.002
    prefill_s_per_token: float = 0.0
    has_tokenizer: bool = False
    faults: Faults = field(default_factory=Faults)
    requests: list[dict[str, Any]] = field(default_factory=list)
    kv_pulled: list[dict[str, Any]] = field(default_factory=list)
    # Held before a streamed answer's first token until set (None: no wait).
    first_token_gate: threading.Event | None = None
    cancelled: int = 0
    finished: int = 0
    running: int = 0
    port: int = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def start(self) -> FakeEngine:
        if not self.port:
            self.port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                self.app(), host="127.0.0.1", port=self.port, log_level="critical", access_log=False
            )
        )
        self._thread = threading.Thread(target=server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"fake engine {self.name} did not start on port {self.port}")
            time.sleep(0.01)
        self._server = server
        return self

    def stop(self) -> None:
        """Stop like a killed engine: open streams are cut, new connections refused."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            self._thread.join(timeout=10)
            self._server = None

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )

    async def health(self, request: Request) -> Response:
        return PlainTextResponse("")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def metrics(self, request: Request) -> Response:
        text = (
            f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} {self.running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 0\n'
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.0\n'
        )
        return PlainTextResponse(text)

    async def tokenize(self, request: Request) -> Response:
        if not self.has_tokenizer:
            return JSONResponse({"error": {"message": "tokenizer not initialized"}}, status_code=400)
        body = orjson.loads(await request.body())
        text = body.get("prompt") or "".join(str(m.get("content", "")) for m in body.get("messages", []))
        return JSONResponse({"tokens": [ord(c) % 32000 for c in text], "count": len(text)})

    async def completions(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        faults = self.faults
        if faults.hang_s:
            await asyncio.sleep(faults.hang_s)
        if faults.status is not None:
            return JSONResponse({"error": {"message": "injected", "code": faults.status}}, faults.status)
        kv = body.get("kv_transfer_params")
        if kv and kv.get("do_remote_prefill"):
            if faults.decode_status_with_kv is not None:
                return JSONResponse({"error": {"message": "no KV found"}}, faults.decode_status_with_kv)
            self.kv_pulled.append(kv)
        prompt: list[int] = list(body["prompt"])
        max_tokens = int(body.get("max_tokens", 16))
        await asyncio.sleep(self.prefill_s_per_token * len(prompt))
        if not body.get("stream"):
            out = list(prompt)
            for _ in range(max_tokens):
                out.append(next_token(out))
            answer: dict[str, Any] = {
                "id": "cmpl-x",
                "object": "text_completion",
                "model": MODEL,
                "choices": [
                    {"index": 0, "text": "", "token_ids": out[len(prompt) :], "finish_reason": "length"}
                ],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": max_tokens},
            }
            if kv and kv.get("do_remote_decode"):
                answer["kv_transfer_params"] = {
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_engine_id": self.name,
                    "remote_block_ids": [1, 2, 3],
                    "remote_host": "127.0.0.1",
                    "remote_port": self.port,
                }
            self.finished += 1
            return JSONResponse(answer)
        return StreamingResponse(self._stream(prompt, max_tokens), media_type="text/event-stream")

    async def _stream(self, prompt: list[int], max_tokens: int) -> Any:
        out = list(prompt)
        self.running += 1
        done = False
        try:
            for i in range(max_tokens):
                if self.faults.die_after_tokens is not None and i >= self.faults.die_after_tokens:
                    raise ConnectionAbortedError("injected death mid-stream")
                await asyncio.sleep(self.token_delay_s)
                gate = self.first_token_gate
                while i == 0 and gate is not None and not gate.is_set():
                    await asyncio.sleep(0.005)
                out.append(next_token(out))
                finish = "length" if i == max_tokens - 1 else None
                event = {
                    "id": "cmpl-x",
                    "object": "text_completion",
                    "model": MODEL,
                    "choices": [{"index": 0, "text": "", "token_ids": [out[-1]], "finish_reason": finish}],
                }
                yield b"data: " + orjson.dumps(event) + b"\n\n"
            usage = {"prompt_tokens": len(prompt), "completion_tokens": max_tokens}
            yield b"data: " + orjson.dumps({"id": "cmpl-x", "choices": [], "usage": usage}) + b"\n\n"
            yield b"data: [DONE]\n\n"
            done = True
        finally:
            self.running -= 1
            if done:
                self.finished += 1
            else:
                self.cancelled += 1


@contextlib.contextmanager
def running(*engines: FakeEngine) -> Any:
    for e in engines:
        e.start()
    try:
        yield engines
    finally:
        for e in engines:
            e.stop()
