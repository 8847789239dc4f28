"""What an operator should deploy, from a ``Plan``: stay co-located, the design's pick, or the
reference optimum.

The pick (the best CUF/TUF candidate) is the design's answer and stays in every plan, but it
can be far below the split the reference search finds (BLOOM-176B, quadratic fits, 8 machines,
prompt 1,500, output 200: the pick is a TUF-D split at 0.54x the co-located baseline while the
reference optimum is 1.34x). The rule, on request rates (requests/s):

1. no split beats the baseline (the reference rate, an upper bound on every candidate, is at
   most the baseline's) -> stay co-located;
2. the pick is within ``PICK_TOLERANCE`` of the reference optimum and beats the baseline ->
   deploy the pick (the design's configuration, CUF/TUF balanced as the design describes);
3. otherwise -> deploy the reference optimum.

The reference optimum lets the faster side idle (alpha <= 1), as the pick's CUF rows do; its
batches are the throughput peaks within memory (``solver.plan.reference``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from solver.plan.plan import Plan

# The pick is preferred when it reaches this share of the reference rate: within 1 %, the
# design's configuration is worth more than the last per cent.
PICK_TOLERANCE = 0.01

Source = Literal["baseline", "pick", "reference"]


@dataclass(frozen=True)
class Recommendation:
    """The configuration to deploy (fleet totals; batches per machine) and why."""

    action: Literal["co-located", "split"]
    source: Source  # "baseline" (co-located), "pick" (the design's CUF/TUF pick) or "reference"
    policy: str  # "co-located", the pick's policy ("CUF-P", ...) or "reference"
    decode_machines: int  # x; the whole fleet when co-located
    prefill_machines: int  # X - x; the whole fleet when co-located
    prefill_batch_tokens: float  # B_p per machine
    decode_batch: float  # n_d per machine (the concurrency n when co-located)
    rate_rps: float  # requests/s over the fleet
    speedup: float  # rate / the co-located baseline's rate
    pick_to_reference: float  # the pick's rate / the reference optimum's rate (<= 1)
    reason: str  # one line


def recommend(plan: Plan) -> Recommendation:
    """The recommendation for ``plan`` (see the module docstring for the rule)."""
    base, pick, ref = plan.baseline, plan.best, plan.reference
    pick_share = pick.rate_rps / ref.rate_rps
    gap = f"the design's pick ({pick.policy}, x = {pick.decode_machines}) reaches {pick_share:.1%} of it"
    if ref.rate_rps <= base.rate_rps:
        return Recommendation(
            action="co-located",
            source="baseline",
            policy="co-located",
            decode_machines=plan.machines,
            prefill_machines=plan.machines,
            prefill_batch_tokens=base.prefill_batch_tokens,
            decode_batch=base.concurrency,
            rate_rps=base.rate_rps,
            speedup=1.0,
            pick_to_reference=pick_share,
            reason=(
                "no split beats co-location: the best split found serves "
                f"{ref.rate_rps / base.rate_rps:.2f}x the co-located rate "
                f"({ref.rate_rps:.4g} against {base.rate_rps:.4g} req/s)"
            ),
        )
    if pick_share >= 1.0 - PICK_TOLERANCE and pick.rate_rps > base.rate_rps:
        return Recommendation(
            action="split",
            source="pick",
            policy=pick.policy,
            decode_machines=pick.decode_machines,
            prefill_machines=pick.prefill_machines,
            prefill_batch_tokens=pick.prefill_batch_tokens,
            decode_batch=pick.decode_batch,
            rate_rps=pick.rate_rps,
            speedup=plan.speedup,
            pick_to_reference=pick_share,
            reason=(
                f"the design's pick serves {plan.speedup:.2f}x the co-located rate and is within "
                f"{PICK_TOLERANCE:.0%} of the reference optimum ({pick_share:.1%})"
            ),
        )
    ref_speedup = ref.rate_rps / base.rate_rps
    return Recommendation(
        action="split",
        source="reference",
        policy="reference",
        decode_machines=ref.decode_machines,
        prefill_machines=ref.prefill_machines,
        prefill_batch_tokens=ref.prefill_batch_tokens,
        decode_batch=ref.decode_batch,
        rate_rps=ref.rate_rps,
        speedup=ref_speedup,
        pick_to_reference=pick_share,
        reason=(
            f"the reference optimum serves {ref_speedup:.2f}x the co-located rate; {gap} "
            f"({plan.speedup:.2f}x co-located)"
        ),
    )
