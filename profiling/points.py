"""Bookkeeping of measurement points: progress bar, samples, failures.

A point that raises (CUDA out of memory, a kernel error, a full KV cache) is reported in one
line on stderr and recorded as failed; the points measured before and after it are kept. Only
a table left with no point at all is an error (``require_table``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from profiling.errors import ProfilingError
from profiling.timing import Timing


class PointRecorder:
    """Runs measurement points under a progress bar (with ETA, on stderr); keeps every sample and
    records failed points instead of losing the ones already measured."""

    def __init__(self, total: int, progress: bool) -> None:
        self.samples: dict[str, list[float]] = {}
        self.failed: list[dict[str, str]] = []
        self._bar = tqdm(total=total, desc="profile", unit="pt", file=sys.stderr, disable=not progress)

    def note(self, message: str) -> None:
        tqdm.write(f"pdroute profile: {message}", file=sys.stderr)

    def run(self, name: str, measure: Callable[[], dict[str, Timing]]) -> dict[str, Timing] | None:
        """Run one point; keep the samples of every timing it returns (keyed by sample name)."""
        self._bar.set_postfix_str(name)
        try:
            timings = measure()
        except (RuntimeError, ProfilingError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            self.failed.append({"point": name, "error": f"{type(exc).__name__}: {reason}"})
            self.note(f"warning: point {name} failed and is skipped ({type(exc).__name__}: {reason})")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return None
        finally:
            self._bar.update(1)
        for key, timing in timings.items():
            self.samples[key] = list(timing.samples_ms)
        return timings

    def close(self) -> None:
        self._bar.close()


def require_table(table: dict[Any, float], name: str, failed: list[dict[str, str]]) -> None:
    if not table:
        first = next((f["error"] for f in failed if f["point"].startswith(name)), "no point ran")
        raise ProfilingError(f"no {name} point could be measured (first failure: {first})")
