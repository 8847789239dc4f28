"""The baseline for ``bench_route``: a bare ASGI app answering every request with fixed JSON.

It still reads the request body, as any JSON API must, so the comparison isolates what
pdroute adds on top (routing, validation, the decision, metrics, serialisation).
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

BODY = (
    b'{"decision":"disaggregated","t_collocated_ms":10333.4784,"t_disaggregated_ms":10300.690634418605,'
    b'"breakdown":{"prefill_ms":88.9856,"transfer_ms":11.70503441860465,"interference_ms":44.4928,'
    b'"decode_collocated_ms":10200.0,"decode_disaggregated_ms":10200.0},"params_id":"1e72a58f77d9",'
    b'"request_id":null}'
)
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
