"""A stand-in OpenAI-compatible engine that costs next to nothing: for measuring the proxy alone.

    .venv/bin/python -m bench.echo_engine --port 8300 [--token-delay-ms 5]

``/v1/completions`` with token ids (streamed one event per token, ``return_token_ids``, usage,
``[DONE]``; or whole), ``/v1/models`` and a vLLM-shaped ``/metrics``. Each token comes
``--token-delay-ms`` after the previous one (the first too); the tokens are arbitrary.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "echo"
METRICS = (
    'vllm:num_requests_running{engine="0",model_name="echo"} 0\n'
    'vllm:num_requests_waiting{engine="0",model_name="echo"} 0\n'
)


def make_app(token_delay_s: float) -> Starlette:
    async def completions(request: Request) -> Response:
        body = orjson.loads(await request.body())
        n = int(body.get("max_tokens", 16))

        async def events() -> AsyncIterator[bytes]:
            for i in range(n):
                await asyncio.sleep(token_delay_s)
                choice = {
                    "index": 0,
                    "text": "",
                    "token_ids": [i + 1],
                    "finish_reason": "length" if i == n - 1 else None,
                }
                yield (
                    b"data: "
                    + orjson.dumps({"id": "cmpl-echo", "object": "text_completion", "choices": [choice]})
                    + b"\n\n"
                )
            yield b"data: " + orjson.dumps({"choices": [], "usage": {"completion_tokens": n}}) + b"\n\n"
            yield b"data: [DONE]\n\n"

        if body.get("stream"):
            return StreamingResponse(events(), media_type="text/event-stream")
        await asyncio.sleep(token_delay_s * n)
        choice = {"index": 0, "text": "", "token_ids": list(range(1, n + 1)), "finish_reason": "length"}
        return Response(orjson.dumps({"choices": [choice]}), media_type="application/json")

    async def models(request: Request) -> Response:
        return Response(
            orjson.dumps({"object": "list", "data": [{"id": MODEL}]}), media_type="application/json"
        )

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(METRICS)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", metrics),
            Route("/health", metrics),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay-ms", type=float, default=5.0)
    args = parser.parse_args()
    uvicorn.run(make_app(args.token_delay_ms / 1e3), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
