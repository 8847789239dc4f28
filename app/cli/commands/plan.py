"""``pdroute plan`` and ``pdroute plan-grid``: the P/D capacity planner on the command line.

    pdroute plan --curves bloom-176b-8xh100 --machines 64 --prompt-len 1024 --output-len 256
    pdroute plan --profile solver/data/profiles/default.json --machines 16 --prompt-len 1024 --output-len 200
    pdroute plan-grid --curves bloom-176b-8xh100 --machines 64 \\
        --prompt-lens 128 256 512 1024 --output-lens 64 128 256 -o results/

``plan`` prints the pick, the baseline and the reference optimum as a table, and the
recommendation (``--json`` for the full answer). ``plan-grid`` writes heatmap_s_p.png,
heatmap_s_d.png, policy_map.png, grid.csv, model_parameters.json and curve_fits.png under the
output folder. matplotlib is imported only by ``plan-grid``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.cli.usage import UsageError
from solver.plan import (
    THROUGHPUT_FITS,
    CurveSet,
    FittedCurves,
    Plan,
    PlanGrid,
    curve_set_from_profile,
    fit_curves,
    model_parameters,
    plan_to_dict,
    recommend,
    resolve_curve_set,
    resolve_profile,
    solve_grid,
    solve_plan,
)
from solver.plan.verify import format_verification, verification_to_dict, verify_plan

# Candidates are vectorised over x: memory and time grow linearly in X (about 60 ms and 70 MB
# per plan at this bound); far beyond it one plan exhausts memory instead of answering.
MAX_CLI_MACHINES = 100_000


def _common(p: argparse.ArgumentParser, *, with_profile: bool = False) -> None:
    if with_profile:
        source = p.add_mutually_exclusive_group(required=True)
        source.add_argument("--curves", help="built-in curve-set name or a curve-set JSON file")
        source.add_argument(
            "--profile", help="curves derived from a pdroute profile (a shipped name or a profile file)"
        )
    else:
        p.add_argument("--curves", required=True, help="built-in curve-set name or a curve-set JSON file")
    p.add_argument("--machines", type=int, required=True, help="X, machines in the fleet (>= 2)")
    p.add_argument("--memory-gb", type=float, help="C, memory per machine (default: the set's)")
    p.add_argument("--weights-gb", type=float, help="C_w, weights per machine (default: the set's)")
    p.add_argument("--throughput-fit", choices=THROUGHPUT_FITS, default="piecewise")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "plan", help="size a P/D split for one workload", description="CUF/TUF split vs co-located."
    )
    _common(p, with_profile=True)
    p.add_argument("--prompt-len", type=int, required=True, help="L_p, prompt tokens")
    p.add_argument("--output-len", type=int, required=True, help="L_d, output tokens")
    p.add_argument("--json", action="store_true", help="print the full answer as JSON")
    p.add_argument("--all-candidates", action="store_true", help="with --json: every candidate")
    p.add_argument(
        "--verify",
        action="store_true",
        help="with --profile: simulate the recommended fleet at the plan's rate and at 1.5x it",
    )
    p.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="with --verify: simulate even when the requests reach beyond the profile's measured "
        "ranges (the tables extended linearly; otherwise refused)",
    )
    p.set_defaults(func=run_plan)
    g: argparse.ArgumentParser = sub.add_parser(
        "plan-grid", help="planner heatmaps over prompt x output lengths", description="S_p/S_d heatmaps."
    )
    _common(g)
    g.add_argument("--prompt-lens", type=int, nargs="+", required=True, help="L_p values (rows)")
    g.add_argument("--output-lens", type=int, nargs="+", required=True, help="L_d values (columns)")
    g.add_argument("-o", "--out", type=Path, default=Path("results"), help="output folder")
    g.set_defaults(func=run_grid)


def _check_machines(machines: int) -> None:
    if machines > MAX_CLI_MACHINES:
        raise UsageError(f"--machines: at most {MAX_CLI_MACHINES}, got {machines}")


def _model(args: argparse.Namespace) -> tuple[CurveSet, FittedCurves]:
    if getattr(args, "profile", None) is not None:
        profile = resolve_profile(args.profile)
        curves = curve_set_from_profile(profile, args.prompt_len, args.output_len)
    else:
        curves = resolve_curve_set(args.curves)
    return curves, fit_curves(curves, args.throughput_fit, args.memory_gb, args.weights_gb)


def _check_lengths(name: str, values: Sequence[int]) -> None:
    bad = [v for v in values if v < 1]
    if bad:
        raise UsageError(f"--{name}: every value must be >= 1, got {bad[0]}")


def _table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as aligned text: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )


def format_plan(plan: Plan) -> str:
    """The pick, the baseline and the reference as an aligned text table, plus notes."""
    b, p, r = plan.baseline, plan.best, plan.reference
    lim = plan.limits
    exact = {True: "exact", False: "boundary"}
    header = [
        f"curves {plan.model.name} ({plan.model.throughput_fit} throughput); X = {plan.machines}, "
        f"L_p = {plan.prompt_len}, L_d = {plan.output_len}",
        f"memory {plan.model.memory_gb:g} GB, weights {plan.model.weights_gb:g} GB; limits: prefill "
        f"{lim.prefill.batch:.6g} tokens ({exact[lim.prefill.is_exact]}), decode {lim.decode.batch:.6g} "
        f"requests ({exact[lim.decode.is_exact]})",
        "",
    ]
    rows = [
        [
            "policy",
            "decode x",
            "prefill X-x",
            "B_p tok",
            "n_p",
            "n_d",
            "alpha_p",
            "alpha_d",
            "P tok/s",
            "D tok/s",
            "req/s",
        ],
        [
            "co-located",
            str(plan.machines),
            str(plan.machines),
            f"{b.prefill_batch_tokens:.6g}",
            f"{b.concurrency:.4g}",
            f"{b.concurrency:.4g}",
            f"{b.prefill_time_share:.3f}",
            f"{1 - b.prefill_time_share:.3f}",
            f"{b.prefill_tokens_per_s:.6g}",
            f"{b.decode_tokens_per_s:.6g}",
            f"{b.rate_rps:.5g}",
        ],
        [
            f"{p.policy} (pick)",
            str(p.decode_machines),
            str(p.prefill_machines),
            f"{p.prefill_batch_tokens:.6g}",
            f"{p.prefill_concurrency:.4g}",
            f"{p.decode_batch:.4g}",
            f"{p.prefill_time_util:.3f}",
            f"{p.decode_time_util:.3f}",
            f"{p.prefill_tokens_per_s:.6g}",
            f"{p.decode_tokens_per_s:.6g}",
            f"{p.rate_rps:.5g}",
        ],
        [
            "reference",
            str(r.decode_machines),
            str(r.prefill_machines),
            f"{r.prefill_batch_tokens:.6g}",
            f"{r.prefill_batch_tokens / plan.prompt_len:.4g}",
            f"{r.decode_batch:.4g}",
            "",
            "",
            f"{r.prefill_tokens_per_s:.6g}",
            f"{r.decode_tokens_per_s:.6g}",
            f"{r.rate_rps:.5g}",
        ],
    ]
    footer = [
        "",
        f"speedup R_s/R_u {plan.speedup:.4f}; S_p {plan.s_p:.4f}; S_d {plan.s_d:.4f}",
        f"pick residuals: concurrency {p.concurrency_residual:+.4f}, rate {p.rate_residual:+.4f}",
        f"CUF concurrency balance at x = {plan.cuf_balanced_decode_machines} "
        f"(real {plan.cuf_balanced_x_real:.3f})",
        f"reference optimum {r.rate_rps:.5g} req/s; gap {plan.reference_gap_rps:.5g} req/s "
        f"({100 * plan.reference_gap_rps / r.rate_rps:.2f}% of the reference)",
        *(f"note: {n}" for n in plan.notes),
        "",
        _recommendation_line(plan),
    ]
    return "\n".join([*header, _table(rows), *footer])


def _recommendation_line(plan: Plan) -> str:
    r = recommend(plan)
    if r.action == "co-located":
        what = f"stay co-located on all {plan.machines} machines (concurrency {r.decode_batch:.4g})"
    else:
        name = "the design's pick" if r.source == "pick" else "the reference optimum"
        what = (
            f"deploy {name}: {r.prefill_machines} prefill machines at B_p {r.prefill_batch_tokens:.6g} "
            f"tokens, {r.decode_machines} decode machines at n_d {r.decode_batch:.4g}, "
            f"{r.rate_rps:.5g} req/s ({r.speedup:.2f}x co-located)"
        )
    return f"recommendation: {what}; {r.reason}"


def run_plan(args: argparse.Namespace) -> int:
    _check_machines(args.machines)
    _check_lengths("prompt-len", [args.prompt_len])
    _check_lengths("output-len", [args.output_len])
    if args.verify and args.profile is None:
        raise UsageError("--verify: needs --profile (the simulator runs on the profile's step times)")
    curves, model = _model(args)
    plan = solve_plan(model, args.machines, args.prompt_len, args.output_len)
    verification = (
        verify_plan(plan, resolve_profile(args.profile), allow_extrapolation=args.allow_extrapolation)
        if args.verify
        else None
    )
    if args.json:
        answer = plan_to_dict(plan, all_candidates=args.all_candidates)
        if args.profile is not None:
            answer["assumptions"] = list(curves.assumptions)
        if verification is not None:
            answer["verification"] = verification_to_dict(verification)
        print(json.dumps(answer, indent=2))
    else:
        print(format_plan(plan))
        if args.profile is not None:  # curves derived here: say from what
            print(*(f"assumption: {a}" for a in curves.assumptions), sep="\n")
        if verification is not None:
            print(format_verification(verification))
    return 0


def write_grid_csv(grid: PlanGrid, path: Path) -> Path:
    """One row per cell: the pick, S_p, S_d, speedups and rates, or the infeasibility reason."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "prompt_len", "output_len", "policy", "decode_machines", "prefill_machines", "s_p", "s_d",
                "speedup", "reference_speedup", "baseline_rps", "best_rps", "reference_rps", "infeasible",
                "recommendation", "recommended_decode_machines", "recommended_speedup",
            ]
        )  # fmt: skip
        for i, prompt_len in enumerate(grid.prompt_lens):
            for j, output_len in enumerate(grid.output_lens):
                plan = grid.plans[i][j]
                if plan is None:
                    w.writerow([prompt_len, output_len, *[""] * 10, grid.infeasible[i][j], "", "", ""])
                    continue
                best, base, ref, rec = plan.best, plan.baseline, plan.reference, recommend(plan)
                w.writerow(
                    [
                        prompt_len, output_len, best.policy, best.decode_machines, best.prefill_machines,
                        f"{plan.s_p:.6g}", f"{plan.s_d:.6g}", f"{plan.speedup:.6g}",
                        f"{ref.rate_rps / base.rate_rps:.6g}", f"{base.rate_rps:.6g}",
                        f"{best.rate_rps:.6g}", f"{ref.rate_rps:.6g}", "",
                        rec.policy, rec.decode_machines, f"{rec.speedup:.6g}",
                    ]
                )  # fmt: skip
    return path


def run_grid(args: argparse.Namespace) -> int:
    _check_machines(args.machines)
    _check_lengths("prompt-lens", args.prompt_lens)
    _check_lengths("output-lens", args.output_lens)
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"-o {args.out}: exists and is not a folder")
    from solver.plots.plan import plot_curve_fits, write_grid_figures

    curves, model = _model(args)
    started = time.perf_counter()
    grid = solve_grid(model, args.machines, args.prompt_lens, args.output_lens)
    solve_s = time.perf_counter() - started
    out: Path = args.out
    title = f"{curves.name}, {model.throughput_fit}"
    params_path = out / "model_parameters.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = [
            *write_grid_figures(grid, title, out),
            write_grid_csv(grid, out / "grid.csv"),
            plot_curve_fits(curves, out / "curve_fits.png", model),
        ]
        params_path.write_text(json.dumps(model_parameters(curves, model, grid), indent=2) + "\n")
    except OSError as exc:
        raise UsageError(f"-o {out}: cannot write the results ({exc.strerror or exc})") from exc
    written.append(params_path)
    cells = len(grid.prompt_lens) * len(grid.output_lens)
    infeasible = sum(r is not None for row in grid.infeasible for r in row)
    print(f"solved {cells} cells ({infeasible} infeasible) for X = {grid.machines} in {solve_s:.3f} s")
    for path in written:
        print(f"wrote {path}")
    return 0
