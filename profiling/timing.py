"""Timers: CUDA events on the GPU, ``time.perf_counter`` on the CPU; warm-ups, then medians.

Every point runs ``warmup`` untimed calls (caches, allocator, clocks settle), then ``repeats``
timed calls; the median is kept (robust to a stray slow run) and all samples are returned.
On CUDA each call is bracketed by events recorded on the current stream and the end event is
synchronised before reading it, so a sample is the GPU time of that call alone.

Steps whose difference matters (the interference measurement subtracts a pure decode step
from a mixed step) are timed *interleaved*: one run of each in turn, so that clock changes and
background load fall on both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from profiling.errors import ProfilingError


@dataclass(frozen=True)
class Timing:
    """Samples of one point in milliseconds."""

    median_ms: float  # the value kept in the profile tables
    samples_ms: tuple[float, ...]  # every timed run, in order


def _check_counts(warmup: int, repeats: int) -> None:
    if warmup < 0 or repeats < 1:
        raise ProfilingError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")


def _cpu_sample(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _cuda_sample(fn: Callable[[], object]) -> float:
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _timings(samples: list[list[float]]) -> tuple[Timing, ...]:
    return tuple(Timing(statistics.median(s), tuple(s)) for s in samples)


def time_interleaved(
    fns: Sequence[Callable[[], object]], *, warmup: int, repeats: int, device: torch.device
) -> tuple[Timing, ...]:
    """One ``Timing`` per function; runs go round-robin (a, b, a, b, ...) after the warm-ups."""
    _check_counts(warmup, repeats)
    if device.type != "cuda":
        return _round_robin(fns, warmup, repeats, _cpu_sample)
    with torch.cuda.device(device):
        for _ in range(warmup):
            for fn in fns:
                fn()
        torch.cuda.synchronize(device)
        return _round_robin(fns, 0, repeats, _cuda_sample)


def _round_robin(
    fns: Sequence[Callable[[], object]],
    warmup: int,
    repeats: int,
    sample: Callable[[Callable[[], object]], float],
) -> tuple[Timing, ...]:
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for out, fn in zip(samples, fns, strict=True):
            out.append(sample(fn))
    return _timings(samples)


def time_step(fn: Callable[[], object], *, warmup: int, repeats: int, device: torch.device) -> Timing:
    """CUDA-event time of ``fn()`` on a CUDA device, ``perf_counter`` time otherwise."""
    return time_interleaved([fn], warmup=warmup, repeats=repeats, device=device)[0]


def time_cpu(fn: Callable[[], object], *, warmup: int, repeats: int) -> Timing:
    """Wall-clock time of ``fn()`` with ``time.perf_counter``."""
    return time_step(fn, warmup=warmup, repeats=repeats, device=torch.device("cpu"))


def time_host_synced(
    fn: Callable[[], object], *, warmup: int, repeats: int, sync: Callable[[], None]
) -> Timing:
    """Wall-clock time of ``fn()`` followed by ``sync()`` (for copies spanning several devices)."""
    _check_counts(warmup, repeats)
    for _ in range(warmup):
        fn()
    sync()

    def synced() -> None:
        fn()
        sync()

    return _round_robin([synced], 0, repeats, _cpu_sample)[0]
