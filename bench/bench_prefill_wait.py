"""The queue-aware model's predicted prefill wait against the simulator's, by placement and load.

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_prefill_wait \\
        [--fleet-profile qwen3-8b_h100_sxm_vllm_network] [--trace CSV] [--max-requests 4000] \\
        [--rates 120,150,181] [--json OUT]

The fleet of ``bench.bench_calibration`` (conditional, 2 prefill + 6 decode GPUs) routes with
queue-aware on the fleet's own params, once per prefill placement (``shared``, ``round-robin``,
``least-loaded``: ``solver.sim.fleet``) and load. Over the disaggregated requests it compares
the model's wait for a prefill GPU at decision time (the breakdown's ``prefill_wait_ms``, W)
with the run's (``SimRecords.prefill_wait_ms``). Printed per run: goodput and SLO attainment
(TTFT 1 s, TPOT 50 ms), the mean waits and their ratio (the bias); over the requests with a
predicted wait (W > 0), the median of actual / predicted wait and the share of them within 15 %
of the prediction (low: the per-request wait is spread, or split in modes, around what the
inputs can tell); and over those whose W makes at least half of their predicted TTFT (the
observations online calibration learns the queue-wait correction from), their number and the
median ratio the calibrator would take (observed TTFT less the other predicted terms, over W).
The baseline is the shared queue, run on the same requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_decisions import DEFAULT_TRACE, ROOT, load_requests, params_for
from pdroute_core.routing.queue_aware import QueueAwareModel
from solver.profile_io import load_profile
from solver.sim import ClusterSimulation, FleetConfig, OutputPrediction, SloLimits, summarize
from solver.sim.calibrating import LearningPolicy
from solver.sim.fleet import PREFILL_QUEUES
from solver.sim.inputs import route_inputs
from solver.sim.latency import StepLatency
from solver.sim.policies import PolicyAnswer, RouteView

SLO = SloLimits(1000.0, 50.0)
DOMINANT = 0.5  # the calibrator's min_share: W at least this share of the predicted TTFT
CLOSE = 0.15


class WaitProbe:
    """queue-aware, keeping each request's predicted wait and disaggregated TTFT (ms)."""

    def __init__(self, model: QueueAwareModel, num_requests: int) -> None:
        self.model = model
        self.wait = np.full(num_requests, np.nan)
        self.ttft = np.full(num_requests, np.nan)

    @property
    def name(self) -> str:
        return "queue-aware"

    def fresh(self) -> LearningPolicy:
        return WaitProbe(self.model, len(self.wait))

    def decide(self, view: RouteView) -> PolicyAnswer:
        b = self.model.decide(route_inputs(view))
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo)

    def decide_for(self, rid: int, view: RouteView) -> PolicyAnswer:
        b = self.model.decide(route_inputs(view))
        self.wait[rid], self.ttft[rid] = b.prefill_wait_ms, b.ttft_disaggregated_ms
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo)

    def observe(
        self, rid: int, ttft_ms: float, tpot_ms: float | None, e2e_ms: float, output_tokens: int
    ) -> None:
        return None


def wait_figures(probe: WaitProbe, actual_wait: np.ndarray, actual_ttft: np.ndarray) -> dict[str, Any]:
    """The comparison of one run (module docstring), over the requests that waited on the pool."""
    on_pool = ~np.isnan(actual_wait)
    pred, act = probe.wait[on_pool], actual_wait[on_pool]
    ttft_pred, ttft = probe.ttft[on_pool], actual_ttft[on_pool]
    row: dict[str, Any] = {
        "num_disaggregated": int(np.count_nonzero(on_pool)),
        "wait_pred_mean_ms": float(np.mean(pred)) if pred.size else None,
        "wait_mean_ms": float(np.mean(act)) if act.size else None,
        "wait_ratio_of_means": float(np.sum(act) / np.sum(pred)) if np.sum(pred) > 0 else None,
    }
    waited = pred > 0.0
    row["num_predicted_wait"] = int(np.count_nonzero(waited))
    row["wait_ratio_median"] = row["share_within"] = None
    if waited.any():
        ratio = act[waited] / pred[waited]
        row["wait_ratio_median"] = float(np.median(ratio))
        row["share_within"] = float(np.mean(np.abs(ratio - 1.0) <= CLOSE))
    dom = waited & (pred >= DOMINANT * ttft_pred)
    row["num_wait_dominated"] = int(np.count_nonzero(dom))
    row["implied_k_median"] = None
    if dom.any():
        implied = (ttft[dom] - (ttft_pred[dom] - pred[dom])) / pred[dom]
        row["implied_k_median"] = float(np.median(implied))
    return row


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fleet-profile", default="qwen3-8b_h100_sxm_vllm_network", help="name or path")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--max-requests", type=int, default=4000)
    parser.add_argument("--rates", default="120,150,181", help="requests/s, comma-separated")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="run requests beyond the profile's measured ranges (tables extended linearly, counted)",
    )
    args = parser.parse_args(argv)
    path = Path(args.fleet_profile)
    if not path.suffix:
        path = ROOT / "solver" / "data" / "profiles" / f"{args.fleet_profile}.json"
    profile = load_profile(path)
    latency = StepLatency(profile)
    model = QueueAwareModel(params_for(args.fleet_profile, profile))
    base = load_requests(args.trace, args.max_requests)
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    print(f"fleet {args.fleet_profile}, conditional 2 prefill + 6 decode GPUs; {base.source}")
    print(
        f"disaggregated requests with a predicted wait W > 0: median actual / predicted wait,"
        f" 'within': |actual / predicted wait - 1| <= {CLOSE:g}; 'dominated': W >= {DOMINANT:g} of"
        " the predicted TTFT (the calibrator's queue-wait observations)"
    )
    out: dict[str, Any] = {"runs": []}
    for rate in rates:
        wl = base.at_rate(rate)
        predicted = OutputPrediction().predict(wl)
        for queue in ("shared", *(q for q in PREFILL_QUEUES if q != "shared")):
            fleet = FleetConfig(
                "conditional",
                2,
                6,
                0,
                max_num_batched_tokens=max(latency.max_chunk, 256),
                prefill_queue=queue,
                allow_extrapolation=args.allow_extrapolation,
            )
            probe = WaitProbe(model, wl.num_requests)
            rec = ClusterSimulation(fleet, latency, probe, slo=SLO).run(wl, predicted)
            m = summarize(rec, rate, SLO)
            row: dict[str, Any] = {"rate": rate, "prefill_queue": queue, "goodput_rps": m.goodput_rps}
            row["slo_attainment"] = m.slo_attainment
            row.update(wait_figures(probe, rec.prefill_wait_ms, rec.ttft_ms))
            out["runs"].append(row)
            print(
                f"  {rate:7.1f}/s {queue:<12} goodput {m.goodput_rps:6.2f}/s"
                f" SLO {100 * m.slo_attainment:5.1f} %"
                f"  wait mean pred {_f(row['wait_pred_mean_ms'], '7.1f')} actual"
                f" {_f(row['wait_mean_ms'], '7.1f')} ms (x{_f(row['wait_ratio_of_means'], '.3f')})"
                f"  W > 0 {row['num_predicted_wait']:4d}: median actual/pred"
                f" {_f(row['wait_ratio_median'], '.3f')},"
                f" within {_f(None if row['share_within'] is None else 100 * row['share_within'], '3.0f')} %;"
                f" dominated {row['num_wait_dominated']:4d}: implied k {_f(row['implied_k_median'], '.3f')}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
