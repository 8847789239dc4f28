"""Online recalibration in the simulator: a deliberately wrong params file, corrected by feedback.

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_calibration \\
        [--fleet-profile qwen3-8b_h100_sxm_vllm_network] [--params qwen3-8b_h200_sxm_vllm_nvlink] \\
        [--rate auto | R] [--trace CSV] [--max-requests N] [--refresh-every 50] [--json OUT] \\
        [--prefill-queue least-loaded | shared | round-robin]

The fleet (conditional, 2 prefill + 6 decode GPUs, token budget the profile's largest chunk)
runs the step times of ``--fleet-profile``'s measured tables; the queue-aware policy decides
with the params file ``--params`` (a different GPU and link: wrong). Four runs on the same
requests:

- ``right``: queue-aware with the fleet's own params (``solver/data/params``, else a fit);
- ``wrong``: queue-aware with ``--params``;
- ``wrong+cal``: the same, recalibrated online from every finished request
  (``solver.sim.calibrating.CalibratingPolicy``, ``pdroute_core.calibration``);
- ``right+cal``: the right params recalibrated (what calibration costs when nothing is wrong).

The prefill pool places each prompt on its least-loaded worker by default: the placement the
model's prefill inputs describe (the pool's waiting and running prompts shared by its GPUs).
``round-robin`` placement ignores the workers' loads, so their backlogs drift apart: at the
test's load (4,000 Poisson requests, ``--rate auto``) the ratio of a request's observed wait to
the model's splits into two modes, most at 0.6-0.9 and 1.3-1.6, and the median the calibrator
takes lands on either (``bench.bench_prefill_wait`` measures it per placement and load;
docs/calibration.md, "Placement").

``--rate auto`` (default) takes the highest load on a 5 % bisection where ``right`` meets the
SLO (TTFT 1 s, TPOT 50 ms) for at least 90 % of the requests. Printed: goodput, SLO attainment,
median absolute relative error of TTFT and e2e over all requests and over those arriving after
convergence; the corrections in force at the last arrival (the load's) and after the drain
that follows it (an emptying fleet's: shrinking batches make every decode faster than its
batch at arrival said); the number of finished requests after which every correction stays
within 5 % of its value at the last arrival; and the ratios (error after / before, goodput
against ``right``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_decisions import DEFAULT_TRACE, ROOT, load_requests, params_for
from pdroute_core.calibration import IDENTITY, TERMS, Corrections
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.params import load_params
from solver.profile_io import load_profile
from solver.sim import (
    ClusterSimulation,
    FleetConfig,
    ModelPolicy,
    OutputPrediction,
    Policy,
    SloLimits,
    summarize,
)
from solver.sim.accuracy import PredictionError
from solver.sim.calibrating import CalibratingPolicy
from solver.sim.fleet import PREFILL_QUEUES
from solver.sim.latency import StepLatency
from solver.sim.records import SimRecords
from solver.sim.workload import Workload

TARGET_ATTAINMENT = 0.9
WINDOW = 500  # requests per window of the convergence figure
ERROR_LIMIT_PCT = 10.0
SETTLED = 0.05  # a correction has settled once it stays within this share of its final value


def converged_after(history: list[tuple[int, Corrections]], term: str) -> int | None:
    """Observations after which ``term``'s correction stays within ``SETTLED`` of its last value
    in ``history``."""
    if not history:
        return None
    final = getattr(history[-1][1], term)
    after = 0
    for count, k in history:
        if abs(getattr(k, term) / final - 1.0) > SETTLED:
            after = count
    return after


def before_drain(
    history: list[tuple[int, Corrections]], arrival_ms: np.ndarray, finish_ms: np.ndarray
) -> list[tuple[int, Corrections]]:
    """The refreshes made before the last arrival. After it the fleet only drains: the batches
    shrink, every request's decode runs faster than its batch at arrival said, and the
    corrections learnt from those requests describe an emptying fleet, not the load run."""
    last_arrival = float(np.max(arrival_ms))
    finished = int(np.count_nonzero(finish_ms <= last_arrival))  # observations by then
    return [(count, k) for count, k in history if count <= finished]


def window_errors(rec: SimRecords, size: int) -> list[tuple[int, float, float]]:
    """(first request, TTFT error p50 %, e2e error p50 %) per window of ``size`` arrivals."""
    out = []
    for start in range(0, rec.num_requests - size + 1, size):
        w = slice(start, start + size)
        t = median_error(rec.predicted_ttft_ms[w], rec.ttft_ms[w])
        e = median_error(rec.predicted_e2e_ms[w], rec.e2e_ms[w])
        out.append((start, np.nan if t is None else t, np.nan if e is None else e))
    return out


def error_convergence(rec: SimRecords, size: int, limit_pct: float) -> tuple[int | None, float]:
    """The first request of the first window whose median TTFT and e2e errors are both within
    ``limit_pct``, and the share of the windows from there on that stay within it."""
    windows = window_errors(rec, size)
    ok = [t <= limit_pct and e <= limit_pct for _, t, e in windows]
    if True not in ok:
        return None, 0.0
    first = ok.index(True)
    return windows[first][0], sum(ok[first:]) / len(ok[first:])


def median_error(pred: np.ndarray, actual: np.ndarray) -> float | None:
    e = PredictionError.of(pred, actual)
    return None if e is None else e.median_rel_pct


class Runs:
    def __init__(self, args: argparse.Namespace) -> None:
        path = Path(args.fleet_profile)
        if not path.suffix:
            path = ROOT / "solver" / "data" / "profiles" / f"{args.fleet_profile}.json"
        profile = load_profile(path)
        self.latency = StepLatency(profile)
        self.fleet = FleetConfig(
            "conditional",
            2,
            6,
            0,
            max_num_batched_tokens=max(self.latency.max_chunk, 256),
            prefill_queue=args.prefill_queue,
            allow_extrapolation=args.allow_extrapolation,
        )
        self.right = QueueAwareModel(params_for(args.fleet_profile, profile))
        wrong_path = Path(args.params)
        if not wrong_path.suffix:
            wrong_path = ROOT / "solver" / "data" / "params" / f"{args.params}.json"
        self.wrong = QueueAwareModel(load_params(wrong_path))
        self.slo = SloLimits(1000.0, 50.0)
        self.base = load_requests(args.trace, args.max_requests)
        self.refresh_every = args.refresh_every

    def run(self, policy: Policy, wl: Workload) -> SimRecords:
        sim = ClusterSimulation(self.fleet, self.latency, policy, slo=self.slo)
        return sim.run(wl, OutputPrediction().predict(wl))

    def attainment(self, rate: float) -> float:
        wl = self.base.at_rate(rate)
        return summarize(self.run(ModelPolicy(self.right, "right"), wl), rate, self.slo).slo_attainment

    def auto_rate(self) -> float:
        low, high = 1.0, 8.0
        while self.attainment(high) >= TARGET_ATTAINMENT:
            low, high = high, high * 2
            if high > 1e5:
                raise RuntimeError("the fleet never misses the SLO")
        while high > low * 1.05:
            mid = (low * high) ** 0.5
            if self.attainment(mid) >= TARGET_ATTAINMENT:
                low = mid
            else:
                high = mid
        return low


def _pct(value: float | None) -> str:
    """A percentage, or "none" when no request was left to measure it on (never converged)."""
    return "none" if value is None else f"{value:.1f} %"


def _ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when either is missing (no request to measure it on)."""
    return None if num is None or den is None or den == 0 else num / den


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fleet-profile", default="qwen3-8b_h100_sxm_vllm_network", help="name or path")
    parser.add_argument(
        "--params", default="qwen3-8b_h200_sxm_vllm_nvlink", help="the wrong params (name or path)"
    )
    parser.add_argument("--rate", default="auto", help="requests/s, or auto (module docstring)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--max-requests", type=int)
    parser.add_argument(
        "--prefill-queue",
        choices=PREFILL_QUEUES,
        default="least-loaded",
        help="the prefill pool's placement (module docstring)",
    )
    parser.add_argument("--refresh-every", type=int, default=50, help="observations between model swaps")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="run requests beyond the profile's measured ranges (tables extended linearly, counted)",
    )
    args = parser.parse_args(argv)
    runs = Runs(args)
    rate = runs.auto_rate() if args.rate == "auto" else float(args.rate)
    wl = runs.base.at_rate(rate)
    print(f"fleet {args.fleet_profile} ({runs.fleet.describe()}), params {args.params}; {wl.source}")
    print(
        f"load {rate:.1f} req/s, {wl.num_requests} requests,"
        f" model swapped every {args.refresh_every} observations"
    )
    policies: dict[str, Policy] = {
        "right": ModelPolicy(runs.right, "right"),
        "wrong": ModelPolicy(runs.wrong, "wrong"),
        "wrong+cal": CalibratingPolicy(runs.wrong, refresh_every=args.refresh_every, name="wrong+cal"),
        "right+cal": CalibratingPolicy(runs.right, refresh_every=args.refresh_every, name="right+cal"),
    }
    out: dict[str, Any] = {"rate": rate, "runs": {}}
    for label, policy in policies.items():
        rec = runs.run(policy, wl)
        m = summarize(rec, rate, runs.slo)
        row: dict[str, Any] = {
            "goodput_rps": m.goodput_rps,
            "slo_attainment": m.slo_attainment,
            "ttft_err_p50_pct": m.ttft_error.median_rel_pct if m.ttft_error else None,
            "e2e_err_p50_pct": m.e2e_error.median_rel_pct if m.e2e_error else None,
        }
        windows = window_errors(rec, WINDOW)
        row["windows_within_limit"] = sum(
            t <= ERROR_LIMIT_PCT and e <= ERROR_LIMIT_PCT for _, t, e in windows
        ) / len(windows)
        line = (
            f"  {label:<10} goodput {m.goodput_rps:8.2f}/s  SLO {100 * m.slo_attainment:5.1f} %"
            f"  error p50 TTFT {row['ttft_err_p50_pct']:5.1f} %  e2e {row['e2e_err_p50_pct']:5.1f} %"
            f"  {WINDOW}-request windows with both <= {ERROR_LIMIT_PCT:.0f} %:"
            f" {100 * row['windows_within_limit']:3.0f} %"
        )
        if isinstance(policy, CalibratingPolicy):
            loaded = before_drain(policy.history, rec.arrival_ms, rec.finish_ms)
            per_term = {t: converged_after(loaded, t) for t in TERMS}
            n_conv, share_ok = error_convergence(rec, WINDOW, ERROR_LIMIT_PCT)
            late = np.arange(rec.num_requests) >= (n_conv if n_conv is not None else rec.num_requests)
            row["converged_after_requests"] = n_conv
            row["windows_within_limit_after"] = share_ok
            row["settled_after_by_term"] = per_term
            row["ttft_err_p50_after_pct"] = median_error(rec.predicted_ttft_ms[late], rec.ttft_ms[late])
            row["e2e_err_p50_after_pct"] = median_error(rec.predicted_e2e_ms[late], rec.e2e_ms[late])
            row["corrections"] = (loaded[-1][1] if loaded else IDENTITY).as_dict()
            row["corrections_after_drain"] = policy.calibrator.current.as_dict()
            row["accepted"] = dict(policy.calibrator.num_accepted)
            ks = ", ".join(f"{t} {v:.3f}" for t, v in row["corrections"].items())
            drained = ", ".join(f"{t} {v:.3f}" for t, v in row["corrections_after_drain"].items())
            conv = ", ".join(f"{t} {v}" for t, v in per_term.items())
            line += (
                f"\n             within 5 % of its value at the last arrival after (requests): {conv}"
                f"\n             first {WINDOW}-request window with both errors <= {ERROR_LIMIT_PCT:.0f} %:"
                f" starts at request {n_conv}; {100 * share_ok:.0f} % of the windows from there stay"
                f" within it; after it: error p50 TTFT"
                f" {_pct(row['ttft_err_p50_after_pct'])}, e2e {_pct(row['e2e_err_p50_after_pct'])}"
                f"\n             corrections at the last arrival: {ks}"
                f"\n             after the drain: {drained}"
            )
        out["runs"][label] = row
        print(line, flush=True)
    r = out["runs"]
    ratios = {
        "ttft_err_cal_over_wrong": _ratio(r["wrong+cal"]["ttft_err_p50_pct"], r["wrong"]["ttft_err_p50_pct"]),
        "e2e_err_cal_over_wrong": _ratio(r["wrong+cal"]["e2e_err_p50_pct"], r["wrong"]["e2e_err_p50_pct"]),
        "ttft_err_after_cal_over_before": _ratio(
            r["wrong+cal"]["ttft_err_p50_after_pct"], r["wrong"]["ttft_err_p50_pct"]
        ),
        "e2e_err_after_cal_over_before": _ratio(
            r["wrong+cal"]["e2e_err_p50_after_pct"], r["wrong"]["e2e_err_p50_pct"]
        ),
        "goodput_wrong_over_right": r["wrong"]["goodput_rps"] / r["right"]["goodput_rps"],
        "goodput_wrong_cal_over_right": r["wrong+cal"]["goodput_rps"] / r["right"]["goodput_rps"],
        "goodput_right_cal_over_right": r["right+cal"]["goodput_rps"] / r["right"]["goodput_rps"],
    }
    out["ratios"] = ratios
    print("  ratios: " + ", ".join(f"{k} {'none' if v is None else f'{v:.3f}'}" for k, v in ratios.items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
