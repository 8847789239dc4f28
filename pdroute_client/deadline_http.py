"""``DeadlineHttp``: blocking ``POST`` with a **total** deadline per call, on a shared keep-alive
pool of sync httpx.

Why: httpx's blocking client bounds each phase (pool, connect, write, every read) by its
timeout, not the call, so a server that trickles its answer a byte per read timeout, or a slow
connect followed by a slow read, holds the caller for several deadlines. A blocking socket read
cannot be interrupted from another thread, and httpx/httpcore offer no public hook to shrink
each phase's timeout to the budget left (capping the phases would mean patching internals).

How: the request runs on a worker of a fixed thread pool and the calling thread waits on its
future for the time left; on expiry the caller gets ``TimeoutError`` at once, whatever the
server does, and the future is cancelled (a request still queued never starts). A worker
already talking to the server is not interruptible: it stops on its own, bounded by httpx's
per-phase timeouts (each set to the budget left when it started) and by a check of the budget
after every chunk of the answer (so a trickled answer is dropped at the deadline, its
connection closed). So a timed-out call leaves a worker busy for at most a few deadlines, and
at most ``max_workers`` such requests exist at once: the pool is fixed, no thread per call.

Measured (``python -m bench.bench_client``; figures in docs/integration.md): the hand-off to a
pool worker costs about 0.1 to 0.3 of a bare loopback call (``Client.route`` went from about
1.0x to about 1.3x a bare blocking httpx call); running the requests on an ``httpx.AsyncClient``
in an event-loop thread instead (cancellable in flight) costs 1.6x to 1.9x a bare call before
any client logic, httpx's async path being itself that much slower than its blocking one.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import httpx

from pdroute_client.client_base import pool_limits


class ClientClosed(RuntimeError):
    """A request was made after ``close()``."""


class DeadlineHttp:
    """``post`` within a total deadline (worker pool); ``get`` on the calling thread (per phase)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_connections: int,
        transport: httpx.BaseTransport | None = None,
        name: str = "pdroute-http",
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(timeout_s),
            limits=pool_limits(max_connections),
            transport=transport,  # None: httpx's default, which never retries
        )
        # Threads start on demand, up to one per pooled connection, and are reused.
        self._workers = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_connections, thread_name_prefix=name
        )

    def post(self, url: str, *, json: Any, deadline_s: float) -> httpx.Response:
        """``POST url``, the answer read in full, within ``deadline_s`` seconds from now; else
        ``TimeoutError``. An httpx error of the request is raised as is."""
        until = time.perf_counter() + deadline_s
        try:
            future = self._workers.submit(self._post_until, url, json, until)
        except RuntimeError:  # submit after shutdown
            raise ClientClosed("the client is closed") from None
        try:
            return future.result(timeout=max(0.0, until - time.perf_counter()))
        except concurrent.futures.TimeoutError:  # the builtin TimeoutError since Python 3.11
            future.cancel()
            raise TimeoutError(f"no answer within {deadline_s * 1e3:.1f} ms") from None

    def _post_until(self, url: str, json: Any, until: float) -> httpx.Response:
        """On a worker: the request with httpx's timeouts at the budget left, dropped as soon as
        the budget is spent between two chunks of the answer."""
        budget_s = until - time.perf_counter()
        if budget_s <= 0:
            raise TimeoutError("the deadline passed before the request started")
        with self.http.stream("POST", url, json=json, timeout=budget_s) as response:
            chunks = []
            for chunk in response.iter_raw():
                if time.perf_counter() > until:
                    raise TimeoutError("the answer was still arriving at the deadline")
                chunks.append(chunk)
        # Rebuilt with the raw bytes and the same headers, so httpx decodes the body once.
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(chunks),
            request=response.request,
        )

    def close(self) -> None:
        """Cancel queued requests, wait for the running ones (each bounded as above), close the
        pool. Idempotent."""
        self._workers.shutdown(wait=True, cancel_futures=True)
        self.http.close()
