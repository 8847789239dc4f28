"""``pdroute plot params.json [--profile PROFILE] -o plots/``: the four figures of a params file.

Decision heatmap, latency bars at loads 0 and 8, transfer vs interference, and the decode
curve (with the measured points when ``--profile`` is given); see docs/fitting.md. Needs
matplotlib (the ``plots`` extra).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from app.cli.usage import UsageError
from pdroute_core.routing.design import AnalyticalCostModel
from solver.params import load_params


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "plot",
        help="draw the figures of a params file",
        description="Draw the routing and fit figures of a params file as PNG files.",
    )
    p.add_argument("params", type=Path, help="params.json")
    p.add_argument("--profile", type=Path, help="the profile it was fitted from (adds measured points)")
    p.add_argument("-o", "--output-dir", type=Path, default=Path("plots"), help="directory for the PNGs")
    p.add_argument("--output-len", type=int, default=200, help="output tokens for the decision heatmap")
    p.add_argument("--chunk-size", type=int, default=256, help="prefill chunk size passed to the router")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for flag, value in (("--output-len", args.output_len), ("--chunk-size", args.chunk_size)):
        if value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value}")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("plotting needs matplotlib: pip install 'pdroute[plots]'")
    model = AnalyticalCostModel(load_params(args.params))
    profile = None
    if args.profile is not None:
        from solver.profile_io import load_profile

        profile = load_profile(args.profile)
    try:
        from solver.plots.costmodel import plot_all

        paths = plot_all(
            model, args.output_dir, output_len=args.output_len, chunk_size=args.chunk_size, profile=profile
        )
    except OSError as exc:
        raise UsageError(f"cannot write the plots into {args.output_dir} ({exc.strerror or exc})") from None
    for path in paths:
        print(f"wrote {path}")
    return 0
