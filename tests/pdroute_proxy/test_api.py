"""``pdroute_proxy.api.DisconnectWatch``: the client's disconnect cancels the request; a request
that ends first stops the watch, which then ends quietly (no error kept, no cycle to collect)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pdroute_proxy.api import DisconnectWatch


def test_a_disconnect_cancels_the_request() -> None:
    async def scenario() -> tuple[bool, bool]:
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def request() -> None:
            await asyncio.sleep(10)

        task = asyncio.create_task(request())
        await asyncio.sleep(0)
        watch = DisconnectWatch(receive, task)
        gone.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return watch.is_gone, task.cancelled()

    assert asyncio.run(scenario()) == (True, True)


def test_a_stopped_watch_ends_without_keeping_an_error() -> None:
    async def scenario() -> tuple[bool, bool, BaseException | None, bool]:
        async def receive() -> dict[str, Any]:
            await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        async def request() -> None:
            await asyncio.sleep(0)

        task = asyncio.create_task(request())
        watch = DisconnectWatch(receive, task)
        await task
        watch.stop()
        await asyncio.wait([watch.watcher])
        return watch.is_gone, watch.watcher.cancelled(), watch.watcher.exception(), task.cancelled()

    assert asyncio.run(scenario()) == (False, False, None, False)
