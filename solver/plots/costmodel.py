"""The four figures of a fitted cost model, as PNG files (matplotlib, Agg, no pyplot).

    from pdroute_core.routing.design import AnalyticalCostModel
    plot_all(AnalyticalCostModel(load_params("params.json")), "plots/", profile=profile)

or ``pdroute plot params.json --profile profile.json -o plots/``. matplotlib is imported inside
the functions only (``solver.plots.figure``), so importing ``solver`` (and running the service)
never needs it. Each figure is titled with the model, the hardware and the params_id.

1. ``decision_heatmap.png``: the routing decision over prompt_len (x, log) by system_load (y);
   collocated red, disaggregated green; computed with the vectorised ``route_many``.
2. ``latency_bars.png``: t_collocated and t_disaggregated per prompt_len at load 0 and load 8,
   each pair marked C or D (output_len 50, as in the design).
3. ``transfer_vs_interference.png``: KV transfer cost (line) and interference cost (dashed)
   against prompt_len; green where the transfer is the cheaper of the two at full load.
4. ``decode_curve.png``: decode step latency against batch, the measured points when a profile
   is given and the fitted two-segment curve, with batch_thresh as a dashed vertical line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from solver.plots.figure import new_figure, save_png

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from pdroute_core.routing.design import AnalyticalCostModel
    from solver.profile_result import ProfileResult

COLLOCATED_COLOUR = "#d62728"  # red
DISAGGREGATED_COLOUR = "#2ca02c"  # green
BAR_PROMPT_LENS = (128, 256, 512, 1024, 2048, 4096, 8192)
BAR_LOADS = (0, 8)


def _plain_log2_x(ax: Axes) -> None:
    """A base-2 log x axis labelled with plain numbers (64, 128, ...) instead of powers."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))


def _title(model: AnalyticalCostModel, what: str) -> str:
    meta = model.params.metadata
    return f"{what}\n{meta.model} on {meta.hardware} · params {model.params.params_id}"


def _is_lower_bound(model: AnalyticalCostModel) -> bool:
    entry = model.params.metadata.fit_quality.get("batch_thresh")
    return isinstance(entry, dict) and entry.get("is_lower_bound") is True


def plot_decision_heatmap(
    model: AnalyticalCostModel, path: str | os.PathLike[str], output_len: int = 200, chunk_size: int = 256
) -> Path:
    """Figure 1: the decision for every (prompt_len, system_load) cell, decode_batch_size 1."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    p = model.params
    load_max = int(min(512, max(32, math.ceil(2 * p.batch_thresh))))
    prompt_lens = np.unique(np.round(np.geomspace(16, 16384, 160)))
    loads = np.arange(0, load_max + 1, dtype=np.float64)
    batch = model.route_many(prompt_lens[None, :], output_len, loads[:, None], 1, chunk_size)
    fig = new_figure(8.0, 5.2)
    ax = fig.add_subplot()
    cmap = ListedColormap([COLLOCATED_COLOUR, DISAGGREGATED_COLOUR])
    ax.pcolormesh(
        prompt_lens,
        loads,
        batch.is_disaggregated.astype(np.float64),
        cmap=cmap,
        vmin=0,
        vmax=1,
        shading="nearest",
    )
    _plain_log2_x(ax)
    ax.set_xlabel("prompt_len (tokens)")
    ax.set_ylabel("system_load (decodes running on the collocated GPU)")
    handles = [
        Patch(color=COLLOCATED_COLOUR, label="collocated"),
        Patch(color=DISAGGREGATED_COLOUR, label="disaggregated"),
    ]
    be = p.break_even_load
    if be < load_max:
        ax.axhline(be, color="white", linestyle="--", linewidth=1.2)
        handles.append(
            Patch(facecolor="none", edgecolor="black", linestyle="--", label=f"break-even load {be:.2f}")
        )
    ax.legend(handles=handles, loc="upper left", framealpha=0.9)
    ax.set_title(_title(model, f"Routing decision (output_len {output_len}, chunk {chunk_size})"))
    return save_png(fig, path)


def _bar_panel(ax: Axes, model: AnalyticalCostModel, load: int, output_len: int, chunk_size: int) -> None:
    lens = np.asarray(BAR_PROMPT_LENS, dtype=np.float64)
    batch = model.route_many(lens, output_len, load, 1, chunk_size)
    x = np.arange(len(lens), dtype=np.float64)
    width = 0.38
    ax.bar(x - width / 2, batch.t_collocated_ms, width, color=COLLOCATED_COLOUR, label="t_collocated")
    ax.bar(
        x + width / 2, batch.t_disaggregated_ms, width, color=DISAGGREGATED_COLOUR, label="t_disaggregated"
    )
    tops = np.maximum(batch.t_collocated_ms, batch.t_disaggregated_ms)
    for xi, top, is_d in zip(x, tops, batch.is_disaggregated, strict=True):
        ax.annotate(
            "D" if is_d else "C",
            (xi, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontweight="bold",
            color=DISAGGREGATED_COLOUR if is_d else COLLOCATED_COLOUR,
        )
    ax.set_xticks(x, [str(n) for n in BAR_PROMPT_LENS])
    ax.set_xlabel("prompt_len (tokens)")
    ax.set_ylabel("predicted end-to-end latency (ms)")
    ax.set_title(f"system_load {load}")
    ax.margins(y=0.12)
    ax.legend(loc="upper left")


def plot_latency_bars(
    model: AnalyticalCostModel, path: str | os.PathLike[str], output_len: int = 50, chunk_size: int = 256
) -> Path:
    """Figure 2: both paths' predicted latency by prompt_len, at loads 0 and 8, marked C or D."""
    fig = new_figure(11.0, 4.8)
    axes = fig.subplots(1, len(BAR_LOADS))
    for ax, load in zip(axes, BAR_LOADS, strict=True):
        _bar_panel(ax, model, load, output_len, chunk_size)
    fig.suptitle(_title(model, f"Collocated (C) vs disaggregated (D), output_len {output_len}"))
    return save_png(fig, path)


def plot_transfer_vs_interference(model: AnalyticalCostModel, path: str | os.PathLike[str]) -> Path:
    """Figure 3: KV transfer cost vs interference cost (at several loads) against prompt_len."""
    p = model.params
    lens = np.linspace(0, 8192, 257)
    transfer = lens * p.transfer_rate_ms_per_token
    full = p.gamma * lens
    fig = new_figure(8.0, 5.2)
    ax = fig.add_subplot()
    ax.fill_between(
        lens,
        transfer,
        full,
        where=transfer < full,
        color=DISAGGREGATED_COLOUR,
        alpha=0.2,
        label="transfer cheaper (at load >= batch_thresh)",
    )
    ax.plot(lens, transfer, color="black", linewidth=2, label=f"KV transfer ({p.bandwidth_GBps:.4g} GB/s)")
    ax.plot(
        lens,
        full,
        color=COLLOCATED_COLOUR,
        linestyle="--",
        linewidth=2,
        label="interference, load >= batch_thresh",
    )
    for load in (1, 2, 4, 8, 16, 32, 64, 128):
        if load >= p.batch_thresh:
            break
        ax.plot(
            lens,
            full * load / p.batch_thresh,
            color=COLLOCATED_COLOUR,
            linestyle="--",
            linewidth=0.8,
            alpha=0.5,
        )
        ax.annotate(
            f"load {load}", (lens[-1], full[-1] * load / p.batch_thresh), fontsize=7, ha="right", va="bottom"
        )
    ax.set_xlabel("prompt_len (tokens)")
    ax.set_ylabel("cost (ms)")
    ax.text(
        0.02,
        0.97,
        f"break-even load = batch_thresh x transfer / gamma = {p.break_even_load:.3g}",
        transform=ax.transAxes,
        va="top",
        fontsize=9,
        bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
    )
    ax.legend(loc="center left", fontsize=8)
    ax.set_title(_title(model, "KV transfer vs prefill interference"))
    return save_png(fig, path)


def plot_decode_curve(
    model: AnalyticalCostModel, path: str | os.PathLike[str], profile: ProfileResult | None = None
) -> Path:
    """Figure 4: decode step latency vs batch, measured (per kv_len) and fitted."""
    p = model.params
    measured_max = max((b for _, b in profile.T_decode), default=1) if profile is not None else 1
    b_max = max(64.0, 2.0 * p.batch_thresh, float(measured_max))
    batches = np.geomspace(1.0, b_max, 200)
    fig = new_figure(8.0, 5.2)
    ax = fig.add_subplot()
    if profile is not None:
        markers = "osD^v<>ph*"
        for i, kv in enumerate(sorted({kv for kv, _ in profile.T_decode})):
            pts = sorted((b, ms) for (k, b), ms in profile.T_decode.items() if k == kv)
            ax.scatter(
                [b for b, _ in pts],
                [ms for _, ms in pts],
                marker=markers[i % len(markers)],
                label=f"measured, kv_len {kv}",
            )
    fitted = np.where(batches <= p.batch_thresh, p.beta, p.beta * batches / p.batch_thresh)
    ax.plot(batches, fitted, color="black", linewidth=2, label="fitted beta * max(1, b / batch_thresh)")
    bound = " (lower bound)" if _is_lower_bound(model) else ""
    ax.axvline(
        p.batch_thresh, color="grey", linestyle="--", label=f"batch_thresh = {p.batch_thresh:.3g}{bound}"
    )
    _plain_log2_x(ax)
    ax.set_xlabel("decode batch (sequences)")
    ax.set_ylabel("decode step latency (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(_title(model, "Decode step vs batch"))
    return save_png(fig, path)


def plot_all(
    model: AnalyticalCostModel,
    output_dir: str | os.PathLike[str],
    output_len: int = 200,
    chunk_size: int = 256,
    profile: ProfileResult | None = None,
    bars_output_len: int = 50,
) -> list[Path]:
    """Write the four figures into ``output_dir`` (created if needed); return their paths.

    ``output_len`` applies to the heatmap; the bar figure uses ``bars_output_len`` (50, as in
    the design). ``profile`` adds the measured decode points to figure 4.
    """
    out = Path(output_dir)
    return [
        plot_decision_heatmap(model, out / "decision_heatmap.png", output_len, chunk_size),
        plot_latency_bars(model, out / "latency_bars.png", bars_output_len, chunk_size),
        plot_transfer_vs_interference(model, out / "transfer_vs_interference.png"),
        plot_decode_curve(model, out / "decode_curve.png", profile),
    ]
