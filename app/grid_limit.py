"""A service-wide cap on concurrent ``POST /plan/grid`` computations.

A 32 x 32 grid holds one CPU for a few tenths of a second (seconds at X = 1,000 with curves that
have many TUF roots), and the plan handlers run in the threadpool: without a cap, enough
concurrent grids take every core from ``/route``. Beyond the cap a request is refused at once,
429 with ``Retry-After``, and counted; it is never queued, since a queue would hide the overload
from the client and from the metrics. The cap is ``PDROUTE_MAX_CONCURRENT_GRIDS`` per process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from fastapi import HTTPException
from prometheus_client import Counter, Gauge

RETRY_AFTER_S = 1  # a grid takes well under a second on a quiet machine


class GridLimit:
    """At most ``limit`` grid computations at once in this process (thread-safe)."""

    def __init__(self, limit: int, rejected: Counter, in_progress: Gauge) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._rejected = rejected
        self._in_progress = in_progress

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the ``with`` block; raise a 429 ``HTTPException`` when none is free."""
        if not self._slots.acquire(blocking=False):
            self._rejected.inc()
            raise HTTPException(
                status_code=429,
                detail=(
                    f"too many plan grids in progress (at most {self.limit} at once, "
                    f"PDROUTE_MAX_CONCURRENT_GRIDS); retry after {RETRY_AFTER_S} s"
                ),
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._in_progress.inc()
        try:
            yield
        finally:
            self._in_progress.dec()
            self._slots.release()
