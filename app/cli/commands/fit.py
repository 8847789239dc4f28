"""``pdroute fit PROFILE -o params.json``: fit the cost model to a profile, print the report.

Writes ``params.json`` and, beside it, ``<stem>.fit_report.json``; prints the report's table
(values, R^2, worst residual, warnings). The fitting rules are ``solver.fit``'s
(docs/fitting.md). A ``.pt`` profile needs torch; the JSON form does not.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.usage import UsageError
from solver.fit import fit_profile, save_fit_report
from solver.fit_report import fit_report_path
from solver.params import save_params
from solver.profile_io import load_profile


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fit",
        help="fit params.json to a profile",
        description="Fit the cost model's parameters to a profile (JSON or .pt) and report the fit.",
    )
    p.add_argument("profile", type=Path, help="profile_data.pt or its JSON form")
    p.add_argument("-o", "--output", type=Path, default=Path("params.json"), help="params file to write")
    p.add_argument("--model", help="model name for the params metadata (default: from the profile)")
    p.add_argument("--hardware", help="hardware name for the params metadata (default: from the profile)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        params, report = fit_profile(
            load_profile(args.profile), model_name=args.model, hardware=args.hardware
        )
        saved = save_params(params, args.output)
        save_fit_report(report, fit_report_path(saved))
    except OSError as exc:  # reading errors are InvalidProfile already: this is the writing
        raise UsageError(f"cannot write {args.output} ({exc.strerror or exc})") from None
    print(report.format_table())
    print()
    print(f"wrote {args.output} (params_id {params.params_id})")
    print(f"wrote {fit_report_path(args.output)}")
    print(f"break-even load {params.break_even_load:.3f}")
    return 0
