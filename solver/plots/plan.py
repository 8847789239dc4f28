"""Planner figures as PNG files (matplotlib imported inside the functions, ``solver.plots.figure``).

* ``plot_speedup_heatmap``: S_p or S_d over prompt length (rows) x output length (columns),
  coloured around 1 (split wins above, co-located wins below), infeasible cells grey;
* ``plot_policy_map``: the winning policy label per cell, lettered with the recommendation;
* ``plot_curve_fits``: a curve set's points with the fitted capacity and throughput functions,
  the memory line and the capacity limits, for checking the fits by eye.

Used by ``pdroute plan-grid``; the pure solver never imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from solver.plan.curves import throughput_at
from solver.plan.curvesets import CurveSet
from solver.plan.fitted import FittedCurves, fit_curves
from solver.plan.plan import PlanGrid
from solver.plan.recommend import recommend
from solver.plots.figure import new_figure, save_png

if TYPE_CHECKING:
    from matplotlib.axes import Axes

POLICIES = ("CUF-P", "CUF-D", "TUF-P", "TUF-D")
POLICY_COLOURS = ("#1f77b4", "#aec7e8", "#d62728", "#ff9896", "#bbbbbb")  # last: infeasible
ANNOTATE_MAX_CELLS = 144
RECOMMENDATION_LETTERS = {"pick": "P", "reference": "R", "baseline": "C"}


def _grid_axes(ax: Axes, grid: PlanGrid) -> None:
    ax.set_xticks(range(len(grid.output_lens)), [str(v) for v in grid.output_lens], rotation=90, fontsize=7)
    ax.set_yticks(range(len(grid.prompt_lens)), [str(v) for v in grid.prompt_lens], fontsize=7)
    ax.set_xlabel("output length L_d (tokens)")
    ax.set_ylabel("prompt length L_p (tokens)")


def plot_speedup_heatmap(
    grid: PlanGrid, values: npt.NDArray[np.float64], what: str, title: str, path: str | os.PathLike[str]
) -> Path:
    """A heatmap of ``values`` (S_p or S_d per cell) with a colour scale centred on 1."""
    from matplotlib.colors import TwoSlopeNorm

    finite = values[np.isfinite(values)]
    low = float(min(finite.min(), 0.999)) if finite.size else 0.5
    high = float(max(finite.max(), 1.001)) if finite.size else 1.5
    fig = new_figure(8.0, 6.5)
    ax = fig.add_subplot()
    ax.set_facecolor("#bbbbbb")  # NaN cells (infeasible) show the background
    image = ax.imshow(
        np.ma.masked_invalid(values),
        cmap="RdYlGn",
        norm=TwoSlopeNorm(1.0, low, high),
        origin="lower",
        aspect="auto",
    )
    fig.colorbar(image, ax=ax, label=f"{what} (split / co-located)")
    if values.size <= ANNOTATE_MAX_CELLS:
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    _grid_axes(ax, grid)
    ax.set_title(f"{what}: {title} (X = {grid.machines}; grey = infeasible)")
    return save_png(fig, path)


def plot_policy_map(grid: PlanGrid, title: str, path: str | os.PathLike[str]) -> Path:
    """The winning policy per cell, one colour per label, and the recommendation as a letter
    (``RECOMMENDATION_LETTERS``: P deploy the pick, R the reference optimum, C stay co-located)."""
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    codes = np.array(
        [[len(POLICIES) if p is None else POLICIES.index(p) for p in row] for row in grid.policy],
        dtype=np.float64,
    )
    fig = new_figure(8.0, 6.5)
    ax = fig.add_subplot()
    ax.imshow(
        codes,
        cmap=ListedColormap(POLICY_COLOURS),
        vmin=-0.5,
        vmax=len(POLICIES) + 0.5,
        origin="lower",
        aspect="auto",
    )
    fontsize = 7 if codes.size <= ANNOTATE_MAX_CELLS else 5
    for (i, j), plan in np.ndenumerate(np.array(grid.plans, dtype=object)):
        if plan is not None:
            letter = RECOMMENDATION_LETTERS[recommend(plan).source]
            ax.text(j, i, letter, ha="center", va="center", fontsize=fontsize, fontweight="bold")
    labels = (*POLICIES, "infeasible")
    letters = [
        Line2D([], [], linestyle="none", marker=f"${letter}$", color="k", label=meaning)
        for letter, meaning in (("P", "deploy the pick"), ("R", "the reference"), ("C", "stay co-located"))
    ]
    ax.legend(
        handles=[Patch(color=c, label=lab) for c, lab in zip(POLICY_COLOURS, labels, strict=True)] + letters,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
    )
    _grid_axes(ax, grid)
    ax.set_title(f"winning policy, lettered with the recommendation: {title} (X = {grid.machines})")
    return save_png(fig, path)


def plot_curve_fits(
    curves: CurveSet, path: str | os.PathLike[str], model: FittedCurves | None = None
) -> Path:
    """Points and fitted functions of both phases: capacity (GB) and throughput (tokens/s).

    Throughput shows both the clamped piecewise-linear curve and the quadratic fit; capacity shows
    the quadratic fit, the memory C and the capacity limit C^-1(C).
    """
    from solver.plan.baseline import phase_limits

    model = model or fit_curves(curves)
    piecewise, quadratic = fit_curves(curves, "piecewise"), fit_curves(curves, "quadratic")
    limits = phase_limits(model, 1)
    fig = new_figure(11.0, 8.0, constrained=False)  # constrained layout would measure every log tick
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.92, hspace=0.3, wspace=0.22)
    axes = fig.subplots(2, 2)
    for col, name in enumerate(("prefill", "decode")):
        phase = getattr(curves, name)
        fitted = getattr(model, name)
        limit = (limits.prefill if name == "prefill" else limits.decode).batch
        top = max(limit, *phase.capacity.batches, *phase.throughput.batches) * 1.15
        lo = min(*phase.capacity.batches, *phase.throughput.batches) * 0.8
        b = np.geomspace(lo, top, 400)
        ax = axes[0][col]
        ax.scatter(
            phase.capacity.batches,
            phase.capacity.values,
            s=18,
            color="k",
            label=phase.capacity.label,
            zorder=3,
        )
        cap = fitted.capacity
        ax.plot(b, cap(b), color="C0", label=f"quadratic: {cap.c0:.4g} {cap.c1:+.4g}·B {cap.c2:+.3g}·B²")
        ax.axhline(model.memory_gb, color="C3", ls="--", lw=1, label=f"memory C = {model.memory_gb:g} GB")
        ax.axvline(limit, color="C2", ls=":", lw=1, label=f"limit C⁻¹(C) = {limit:.4g}")
        ax.set_ylabel("memory (GB)")
        ax.set_title(f"{name} capacity")
        ax = axes[1][col]
        tp = phase.throughput
        ax.scatter(tp.batches, tp.values, s=18, color="k", label=tp.label, zorder=3)
        ax.plot(
            b, throughput_at(getattr(piecewise, name).throughput, b), color="C1", label="piecewise (clamped)"
        )
        ax.plot(
            b,
            throughput_at(getattr(quadratic, name).throughput, b),
            color="C4",
            ls="--",
            label="quadratic fit",
        )
        ax.axvspan(min(tp.batches), max(tp.batches), color="0.9", zorder=0, label="observed range")
        ax.set_ylabel("throughput (tokens/s)")
        ax.set_title(f"{name} throughput")
        for row in (0, 1):
            axes[row][col].set_xscale("log")
            axes[row][col].set_xlabel(f"batch ({phase.batch_unit})")
            axes[row][col].legend(fontsize=7)
    fig.suptitle(f"{curves.name}: {curves.model} on {curves.hardware}")
    return save_png(fig, path)


def write_grid_figures(
    grid: PlanGrid, title: str, out_dir: str | os.PathLike[str], prefix: str = ""
) -> Sequence[Path]:
    """S_p, S_d and policy-map PNGs for ``grid`` under ``out_dir``; returns the paths."""
    out = Path(out_dir)
    return (
        plot_speedup_heatmap(grid, grid.s_p, "S_p", title, out / f"{prefix}heatmap_s_p.png"),
        plot_speedup_heatmap(grid, grid.s_d, "S_d", title, out / f"{prefix}heatmap_s_d.png"),
        plot_policy_map(grid, title, out / f"{prefix}policy_map.png"),
    )
