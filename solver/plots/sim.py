"""Figures of a sweep: latency against offered load per policy, and the CDF of end-to-end latency.

matplotlib is imported inside the functions (``solver.plots.figure``), so importing ``solver.sim``
stays light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from solver.errors import InvalidSimConfig
from solver.plots.figure import new_figure, save_png
from solver.sim.report import LatencyStats, PolicyMetrics

if TYPE_CHECKING:
    from solver.sim.sweep import SweepResult

_PANELS = (("e2e_ms", "end-to-end latency (ms)"), ("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"))


def _stat(m: PolicyMetrics, field: str, which: str) -> float:
    stats: LatencyStats = getattr(m, field)
    value = getattr(stats, which)
    return float("nan") if value is None else float(value)


def plot_latency_vs_load(result: SweepResult, path: str | os.PathLike[str]) -> Path:
    """p50 (solid) and p99 (dashed) of e2e latency, TTFT and TPOT against offered load; a PNG."""
    fig = new_figure(15, 4.5)
    axes = fig.subplots(1, len(_PANELS))
    for policy in result.policies:
        rows = sorted((m for m in result.metrics if m.policy == policy), key=lambda m: m.offered_rate)
        rates = [m.offered_rate for m in rows]
        for ax, (field, _label) in zip(axes, _PANELS, strict=True):
            (line,) = ax.plot(
                rates, [_stat(m, field, "p50") for m in rows], marker="o", label=f"{policy} p50"
            )
            ax.plot(
                rates,
                [_stat(m, field, "p99") for m in rows],
                marker="x",
                linestyle="--",
                color=line.get_color(),
                label=f"{policy} p99",
            )
    for ax, (_field, label) in zip(axes, _PANELS, strict=True):
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle("latency vs offered load (solid p50, dashed p99)")
    return save_png(fig, path)


def plot_e2e_cdf(result: SweepResult, rate: float, path: str | os.PathLike[str]) -> Path:
    """Empirical CDF of end-to-end latency per policy at the swept load nearest ``rate``."""
    rates = result.rates
    if not rates:
        raise InvalidSimConfig("no load to plot")
    nearest = min(rates, key=lambda r: abs(r - rate))
    fig = new_figure(7, 4.5)
    ax = fig.subplots()
    for policy in result.policies:
        values = np.sort(result.e2e_ms[(policy, nearest)])
        ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=policy)
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("share of requests")
    ax.set_title(f"CDF of end-to-end latency at {nearest:g} requests/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return save_png(fig, path)
