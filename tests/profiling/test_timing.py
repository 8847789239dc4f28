"""Warm-ups, repeats and medians of the timers (with a fake clock: no wall-clock assertions)."""

from __future__ import annotations

import itertools

import pytest

from profiling import timing
from profiling.errors import ProfilingError


def test_cpu_timer_runs_warmups_then_repeats_and_keeps_the_median(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    # perf_counter is read twice per timed run; durations 5, 1, 3 ms.
    ticks = iter([0.0, 0.005, 1.0, 1.001, 2.0, 2.003])
    monkeypatch.setattr("profiling.timing.time.perf_counter", lambda: next(ticks))
    result = timing.time_cpu(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5
    assert result.samples_ms == pytest.approx((5.0, 1.0, 3.0))
    assert result.median_ms == pytest.approx(3.0)


def test_host_synced_timer_syncs_after_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    clock = itertools.count()
    monkeypatch.setattr("profiling.timing.time.perf_counter", lambda: float(next(clock)))
    result = timing.time_host_synced(
        lambda: events.append("run"), warmup=1, repeats=2, sync=lambda: events.append("sync")
    )
    assert events == ["run", "sync", "run", "sync", "run", "sync"]
    assert len(result.samples_ms) == 2


@pytest.mark.parametrize(("warmup", "repeats"), [(-1, 3), (0, 0)])
def test_bad_counts_are_refused(warmup: int, repeats: int) -> None:
    with pytest.raises(ProfilingError, match="warmup"):
        timing.time_cpu(lambda: None, warmup=warmup, repeats=repeats)
