"""``bench.bare_app`` that first spends ``PDROUTE_BENCH_SPIN_US`` microseconds of CPU per request.

A busy wait on ``time.perf_counter``: work with no memory traffic, no allocation and no cache
footprint, so that ``bench.bench_floor`` measures what a given amount of per-request work in
the app costs under ``wrk``, whatever the work is.
"""

from __future__ import annotations

import os
import time

from starlette.types import Receive, Scope, Send

from bench.bare_app import BODY, HEADERS
from bench.bare_app import app as bare

SPIN_S = float(os.environ.get("PDROUTE_BENCH_SPIN_US", "0")) * 1e-6


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        await bare(scope, receive, send)
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
