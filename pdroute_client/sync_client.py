"""``Client``: the blocking gateway client (httpx, a keep-alive pool, no retries).

Deadline: the whole remote call (pool, connect, write, every read) is bounded by
``deadline_s``, whatever the server does (a slow connect or write, an answer trickled byte by
byte, a read that never ends); past it the local tier answers (counted as a timeout). httpx's
blocking client only bounds each phase, so each decision's request runs on a worker of a fixed
thread pool and the calling thread waits for the time left (``pdroute_client.deadline_http``
says why this design, what it costs and how a timed-out worker stops).

Params for the local tier are fetched by a daemon thread: at start-up, then every
``refresh_interval_s`` with ``If-None-Match`` (a 304 costs almost nothing), and at once when a
remote answer names params the cache does not hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

import httpx
from prometheus_client import CollectorRegistry

from pdroute_client.answer import Answer
from pdroute_client.breaker import BreakerConfig
from pdroute_client.call import RemoteCall
from pdroute_client.client_base import ClientBase
from pdroute_client.deadline_http import DeadlineHttp
from pdroute_client.static import StaticFallback
from pdroute_client.tiers import QueryLike, Tiers

DEFAULT_DEADLINE_S = 0.020
DEFAULT_BATCH_DEADLINE_S = 0.200
MIN_REFRESH_GAP_S = 0.25


class Client(ClientBase):
    """Decides through the service, else locally, else statically; never raises for a failure of
    the service. Raises ``InvalidArgument`` for a request the service would refuse.

    Safe to share between threads. Use as a context manager, or call ``close()``: it stops the
    refresh thread, the workers and the pool; calls after it answer locally.
    """

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
        transport: httpx.BaseTransport | None = None,
        start: bool = True,
    ) -> None:
        super().__init__(deadline_s, batch_deadline_s, refresh_interval_s, refresh_timeout_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._has_params = threading.Event()
        self._tiers = Tiers(fallback or StaticFallback(), breaker, registry, clock, self._wake.set)
        self._http = DeadlineHttp(
            base_url, timeout_s=self.deadline_s, max_connections=max_connections, transport=transport
        )
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # Lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the params refresh thread (its first fetch is immediate)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._refresh_loop, name="pdroute-params", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.refresh_timeout_s + 1)
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # Decisions -----------------------------------------------------------------------------

    def route(self, query: QueryLike, *, deadline_s: float | None = None) -> Answer:
        """One decision (``POST /route``, else the local tier, else the static fallback)."""
        call = RemoteCall.single(self._tiers, query, deadline_s, self.deadline_s)
        return call.finish(self._send(call) if call.is_allowed else None)[0]

    def route_batch(self, queries: Sequence[QueryLike], *, deadline_s: float | None = None) -> list[Answer]:
        """Many decisions in order (``POST /route/batch``, else locally); every answer has a tier."""
        call = RemoteCall.batch(self._tiers, queries, deadline_s, self.batch_deadline_s)
        return call.finish(self._send(call) if call.is_allowed else None)

    def _send(self, call: RemoteCall) -> httpx.Response | Exception:
        """The service's response within the time left of the call's deadline, or what failed."""
        try:
            return self._http.post(call.path, json=call.body(), deadline_s=call.remaining_s())
        except Exception as exc:  # never raise for the service: any failure falls back
            return exc

    # Params --------------------------------------------------------------------------------

    def wait_for_params(self, timeout_s: float) -> bool:
        """Block until the local tier has params (or ``timeout_s``); whether it has them."""
        return self._has_params.wait(timeout_s)

    def refresh_params(self) -> bool:
        """One ``GET /params`` now (with ``If-None-Match``); whether it succeeded. Never raises."""
        try:
            # On the refresh thread, off the hot path: httpx's per-phase timeouts suffice.
            response = self._http.http.get(
                "/params", headers=self._tiers.params_headers(), timeout=self.refresh_timeout_s
            )
            self._tiers.params_response(response)
        except Exception as exc:
            self._tiers.params_failed(exc)
            return False
        self._has_params.set()
        return True

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self.refresh_params()
            # At most one fetch per MIN_REFRESH_GAP_S, however often answers ask for one.
            if self._stop.wait(MIN_REFRESH_GAP_S):
                break
            self._wake.wait(max(0.0, self.refresh_interval_s - MIN_REFRESH_GAP_S))
