"""A circuit breaker in front of the remote tier, on an injected clock.

Closed: every call goes to the service. It opens after ``consecutive_failures`` failures in a
row, or when at least ``min_calls`` calls in the last ``window_s`` seconds failed in a ratio of
``failure_ratio`` or more. Open: no call goes out (the local tier answers at once, so a dead
service costs the gateway nothing per request) until ``cool_down_s`` has passed. Half-open: one
probe call at a time goes out; a success closes the breaker (and clears the window), a failure
opens it again for another cool-down.

Thread-safe (one lock); the async client shares it (its methods never block on I/O).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

State = Literal["closed", "open", "half_open"]
CLOSED: State = "closed"
OPEN: State = "open"
HALF_OPEN: State = "half_open"
STATES: tuple[State, ...] = (CLOSED, OPEN, HALF_OPEN)


@dataclass(frozen=True)
class BreakerConfig:
    """When the breaker opens and how long it stays open (seconds)."""

    consecutive_failures: int = 5  # open after this many failures in a row
    failure_ratio: float = 0.5  # ... or this share of failures within the window
    window_s: float = 10.0  # the sliding window of the ratio
    min_calls: int = 20  # the ratio counts only with at least this many calls in the window
    cool_down_s: float = 2.0  # open this long before a half-open probe

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.min_calls < 1:
            raise ValueError("consecutive_failures and min_calls: must be >= 1")
        if not 0 < self.failure_ratio <= 1:
            raise ValueError(f"failure_ratio: must be in (0, 1], got {self.failure_ratio!r}")
        if not (self.window_s > 0 and self.cool_down_s > 0):
            raise ValueError("window_s and cool_down_s: must be > 0")


class CircuitBreaker:
    """``allow()`` before a call; ``record(ok)`` after it. ``on_change(state)`` sees each transition."""

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[State], None] | None = None,
    ) -> None:
        self.config = config or BreakerConfig()
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state: State = CLOSED
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._consecutive = 0
        self._window: deque[tuple[float, bool]] = deque()  # (time, failed)
        self._window_failures = 0

    @property
    def state(self) -> State:
        """The state now (an open breaker past its cool-down reads half-open)."""
        with self._lock:
            self._advance()
            return self._state

    def allow(self) -> bool:
        """Whether a call may go to the service now (in half-open: the one probe)."""
        with self._lock:
            self._advance()
            if self._state == CLOSED:
                return True
            if self._state == HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return True
            return False

    def record(self, ok: bool) -> None:
        """The outcome of a call that ``allow()`` let through."""
        with self._lock:
            now = self._clock()
            if self._state == HALF_OPEN:
                self._probe_in_flight = False
                if ok:
                    self._window.clear()
                    self._window_failures = 0
                    self._consecutive = 0
                    self._set(CLOSED)
                else:
                    self._open(now)
                return
            if self._state == OPEN:
                return  # a call let through before the breaker opened: already counted out
            self._consecutive = 0 if ok else self._consecutive + 1
            self._window.append((now, not ok))
            self._window_failures += 0 if ok else 1
            self._trim(now)
            cfg = self.config
            calls = len(self._window)
            if self._consecutive >= cfg.consecutive_failures or (
                calls >= cfg.min_calls and self._window_failures >= cfg.failure_ratio * calls
            ):
                self._open(now)

    def _trim(self, now: float) -> None:
        while self._window and self._window[0][0] <= now - self.config.window_s:
            _, failed = self._window.popleft()
            self._window_failures -= failed

    def _open(self, now: float) -> None:
        self._opened_at = now
        self._consecutive = 0
        self._set(OPEN)

    def _advance(self) -> None:
        if self._state == OPEN and self._clock() - self._opened_at >= self.config.cool_down_s:
            self._probe_in_flight = False
            self._set(HALF_OPEN)

    def _set(self, state: State) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)
