"""``AsyncClient``: the asyncio gateway client (httpx, a keep-alive pool, no retries).

Deadline: the whole call (pool, connect, write, read, parse) is bounded by ``deadline_s``
(``asyncio.timeout`` around the request, with httpx's own timeouts as a second guard); past it
the request is cancelled and the local tier answers.

Params for the local tier are fetched by a task (started by ``start()`` or ``async with``):
at once, then every ``refresh_interval_s`` with ``If-None-Match``, and at once when a remote
answer names params the cache does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from types import TracebackType

import httpx
from prometheus_client import CollectorRegistry

from pdroute_client.answer import Answer
from pdroute_client.breaker import BreakerConfig
from pdroute_client.call import RemoteCall
from pdroute_client.client_base import ClientBase, pool_limits
from pdroute_client.static import StaticFallback
from pdroute_client.sync_client import DEFAULT_BATCH_DEADLINE_S, DEFAULT_DEADLINE_S, MIN_REFRESH_GAP_S
from pdroute_client.tiers import QueryLike, Tiers


class AsyncClient(ClientBase):
    """The async twin of ``Client``: the same tiers, breaker and metrics, one event loop."""

    def __init__(
        self,
        base_url: str,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        batch_deadline_s: float = DEFAULT_BATCH_DEADLINE_S,
        fallback: StaticFallback | None = None,
        breaker: BreakerConfig | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        refresh_interval_s: float = 5.0,
        refresh_timeout_s: float = 2.0,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(deadline_s, batch_deadline_s, refresh_interval_s, refresh_timeout_s)
        self._wake = asyncio.Event()
        self._has_params = asyncio.Event()
        self._tiers = Tiers(fallback or StaticFallback(), breaker, registry, clock, self._wake.set)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(self.deadline_s),
            limits=pool_limits(max_connections),
            transport=transport,
        )
        self._task: asyncio.Task[None] | None = None

    # Lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the params refresh task on the running loop (its first fetch is immediate)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="pdroute-params")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # Decisions -----------------------------------------------------------------------------

    async def route(self, query: QueryLike, *, deadline_s: float | None = None) -> Answer:
        """One decision (``POST /route``, else the local tier, else the static fallback)."""
        call = RemoteCall.single(self._tiers, query, deadline_s, self.deadline_s)
        return call.finish(await self._send(call) if call.is_allowed else None)[0]

    async def route_batch(
        self, queries: Sequence[QueryLike], *, deadline_s: float | None = None
    ) -> list[Answer]:
        """Many decisions in order (``POST /route/batch``, else locally); every answer has a tier."""
        call = RemoteCall.batch(self._tiers, queries, deadline_s, self.batch_deadline_s)
        return call.finish(await self._send(call) if call.is_allowed else None)

    async def _send(self, call: RemoteCall) -> httpx.Response | Exception:
        """The service's response, or what failed (the whole send bounded by the deadline)."""
        try:
            async with asyncio.timeout(call.deadline_s):
                return await self._http.post(call.path, json=call.body(), timeout=call.deadline_s)
        except Exception as exc:  # never raise for the service: any failure falls back
            return exc

    # Params --------------------------------------------------------------------------------

    async def wait_for_params(self, timeout_s: float) -> bool:
        """Wait until the local tier has params (or ``timeout_s``); whether it has them."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._has_params.wait()
        return self._has_params.is_set()

    async def refresh_params(self) -> bool:
        """One ``GET /params`` now (with ``If-None-Match``); whether it succeeded. Never raises."""
        try:
            async with asyncio.timeout(self.refresh_timeout_s):
                response = await self._http.get(
                    "/params", headers=self._tiers.params_headers(), timeout=self.refresh_timeout_s
                )
            self._tiers.params_response(response)
        except Exception as exc:
            self._tiers.params_failed(exc)
            return False
        self._has_params.set()
        return True

    async def _refresh_loop(self) -> None:
        while True:
            self._wake.clear()
            await self.refresh_params()
            await asyncio.sleep(MIN_REFRESH_GAP_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, self.refresh_interval_s - MIN_REFRESH_GAP_S)):
                    await self._wake.wait()
