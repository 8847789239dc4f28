"""The circuit breaker on a fake clock: consecutive failures, the failure ratio, half-open."""

from __future__ import annotations

from typing import Any

import pytest

from pdroute_client.breaker import BreakerConfig, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def state(b: CircuitBreaker) -> str:
    return b.state  # a plain str: mypy would otherwise narrow the Literal across calls


def breaker(**config: Any) -> tuple[CircuitBreaker, Clock, list[str]]:
    clock = Clock()
    seen: list[str] = []
    return CircuitBreaker(BreakerConfig(**config), clock=clock, on_change=seen.append), clock, seen


def test_consecutive_failures_open_and_a_success_resets_the_count() -> None:
    b, _, seen = breaker(consecutive_failures=3, min_calls=1000)
    for ok in (False, False, True, False, False):
        assert b.allow()
        b.record(ok)
    assert state(b) == "closed"
    b.record(False)
    assert state(b) == "open" and not b.allow() and seen == ["open"]


def test_the_failure_ratio_over_the_window_opens() -> None:
    b, clock, _ = breaker(consecutive_failures=100, failure_ratio=0.5, window_s=10.0, min_calls=10)
    for i in range(9):
        clock.now = i * 0.1
        b.record(i % 2 == 0)  # 5 successes, 4 failures: under min_calls
    assert state(b) == "closed"
    b.record(False)  # 10 calls, 5 failures: the ratio is reached
    assert state(b) == "open"


def test_old_calls_leave_the_window() -> None:
    b, clock, _ = breaker(consecutive_failures=100, failure_ratio=0.6, window_s=10.0, min_calls=4)
    for ok in (False, True, True, False, True, True):  # 2 failures in 6
        b.record(ok)
    clock.now = 20.0  # those six leave the window
    for ok in (False, False, True):
        b.record(ok)
    assert state(b) == "closed"  # 3 calls: under min_calls (with the old six: 4 in 9)
    b.record(False)
    assert state(b) == "open"  # 3 failures in the 4 recent calls (with the old six: 5 in 10, closed)


def test_half_open_lets_one_probe_through() -> None:
    b, clock, seen = breaker(consecutive_failures=1, cool_down_s=5.0)
    b.record(False)
    clock.now = 4.999
    assert not b.allow()
    clock.now = 5.0
    assert b.allow()  # the probe
    assert not b.allow()  # only one at a time
    b.record(False)
    assert state(b) == "open"
    clock.now = 10.0
    assert b.allow()
    b.record(True)
    assert state(b) == "closed" and b.allow() and b.allow()
    assert seen == ["open", "half_open", "open", "half_open", "closed"]


@pytest.mark.parametrize(
    "config",
    [{"consecutive_failures": 0}, {"failure_ratio": 0.0}, {"failure_ratio": 1.5}, {"cool_down_s": 0.0}],
)
def test_bad_config(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        BreakerConfig(**config)
