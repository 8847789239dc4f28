"""The baseline for ``bench_proxy_overhead``: a bare relay, the least any Python proxy adds.

    PDROUTE_BENCH_UPSTREAM=http://127.0.0.1:8300 .venv/bin/python -m uvicorn bench.bare_relay:app

Every POST goes to the same path on ``PDROUTE_BENCH_UPSTREAM`` with its body unread and
unparsed, over the same upstream client as ``pdroute proxy``'s (``pdroute_proxy.http1``), and
the upstream's status and bytes come back as they arrive: no decision, no validation, no
parsing of events, no metrics.
Served by the same uvicorn settings as the proxy, so what ``pdroute proxy`` adds over it is its
own work, and what this adds over a direct call is the hop itself (one more HTTP server and
client in Python).
"""

from __future__ import annotations

import os

from starlette.types import Receive, Scope, Send

from pdroute_proxy.http1 import EngineClient
from pdroute_proxy.upstream import session, timeouts

UPSTREAM = os.environ.get("PDROUTE_BENCH_UPSTREAM", "http://127.0.0.1:8300").rstrip("/")
TIMEOUTS = timeouts(read_s=600.0, connect_s=5.0)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"]["client"] = session()  # the lifespan's state, shared with requests
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await scope["state"]["client"].close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    client: EngineClient = scope["state"]["client"]
    body = b"".join(chunks) if scope["method"] == "POST" else None
    response = await client.open(scope["method"], UPSTREAM + scope["path"], body, TIMEOUTS)
    async with response:
        kind = response.headers.get(b"content-type", b"application/json")
        await send(
            {"type": "http.response.start", "status": response.status, "headers": [(b"content-type", kind)]}
        )
        async for data in response.chunks():
            await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
