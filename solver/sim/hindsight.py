"""``best-static``: the static rules tuned with hindsight, per load, as a baseline.

The grid: always-collocated, always-disaggregated, ``threshold`` at every prompt threshold of
``thresholds``, and ``threshold-queue`` at every (threshold, queue limit) pair; by default
thresholds 0 (always disaggregate a long-enough prompt) to 8,192 tokens and queue limits 1 to
32, plus the threshold and queue limit the sweep's own rules run with (``make_policies``). Every rule of
the grid runs on the same workload; the best by goodput is reported, under the name
``best-static`` with the winning rule as its setting (``best-static[threshold-queue T=1024
Q=4]``). Goodputs within ``GOODPUT_TIE`` (relative) of the best are ties, broken by the lower
TTFT p99, then by grid order (simplest rule first): runs that differ only by the makespan's
last few milliseconds should not pick a rule with a worse tail.

No gateway could pick this rule in advance (it is chosen after seeing the results), so it is
an upper bound for the static rules, not a policy.

Many rules of the grid make the same decisions on a given workload (a threshold above every
prompt, a queue limit the queue never reaches). ``StaticRuns`` runs each distinct one once:
a rule that decides like an earlier run on every view that run recorded would see exactly the
same views (a run is a deterministic function of its decisions), so that run is its run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from solver.sim.policies import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    Policy,
    PromptAndQueueThreshold,
    PromptThreshold,
)
from solver.sim.records import SimRecords
from solver.sim.report import PolicyMetrics

DEFAULT_THRESHOLDS = (0, 256, 512, 1024, 2048, 4096, 8192)  # prompt tokens
DEFAULT_QUEUE_LIMITS = (1, 2, 4, 8, 16, 32)  # requests waiting for a prefill GPU
GOODPUT_TIE = 1e-3  # relative goodput difference below which two rules tie

StaticRule = AlwaysCollocated | AlwaysDisaggregated | PromptThreshold | PromptAndQueueThreshold
STATIC_RULES = (AlwaysCollocated, AlwaysDisaggregated, PromptThreshold, PromptAndQueueThreshold)
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class BestStatic:
    """The hindsight-tuned static rule over a grid of settings (module docstring)."""

    thresholds: tuple[int, ...] = DEFAULT_THRESHOLDS
    queue_limits: tuple[int, ...] = DEFAULT_QUEUE_LIMITS
    name: str = "best-static"

    def including(self, threshold_tokens: int, max_queue_depth: int) -> BestStatic:
        """The grid with one more threshold and queue limit (the rules' configured ones, so
        that ``best-static`` is never below ``threshold`` and ``threshold-queue`` as run)."""
        return replace(
            self,
            thresholds=tuple(sorted({*self.thresholds, threshold_tokens})),
            queue_limits=tuple(sorted({*self.queue_limits, max_queue_depth})),
        )

    def rules(self) -> tuple[StaticRule, ...]:
        """The grid, simplest rules first."""
        return (
            AlwaysCollocated(),
            AlwaysDisaggregated(),
            *(PromptThreshold(t) for t in self.thresholds),
            *(PromptAndQueueThreshold(t, q) for t in self.thresholds for q in self.queue_limits),
        )


def rule_setting(rule: StaticRule) -> str:
    """The rule and its settings, as shown in ``best-static[...]``."""
    if isinstance(rule, PromptThreshold | PromptAndQueueThreshold):
        return rule.setting
    return rule.name


def rule_decisions(rule: StaticRule, records: SimRecords) -> BoolArray:
    """Whether ``rule`` disaggregates, on each view ``records`` holds (vectorised ``decide``)."""
    if isinstance(rule, AlwaysCollocated):
        return np.zeros(records.num_requests, dtype=np.bool_)
    if isinstance(rule, AlwaysDisaggregated):
        return np.ones(records.num_requests, dtype=np.bool_)
    uncached = records.prompt_len
    if records.cached_prompt_tokens is not None:  # the rules compare the non-cached part
        uncached = uncached - records.cached_prompt_tokens
    long_prompt: BoolArray = uncached > rule.threshold_tokens
    if isinstance(rule, PromptThreshold):
        return long_prompt
    return long_prompt & (records.prefill_queue_requests < rule.max_queue_depth)


class StaticRuns:
    """Runs of static rules on one workload, each distinct run done once (module docstring).

    ``simulate(policy)`` runs a policy on the workload. The runs kept must be without
    shedding differences: static rules never answer infeasible, so shedding changes nothing.
    """

    def __init__(self, simulate: Callable[[Policy], SimRecords]) -> None:
        self._simulate = simulate
        self._runs: list[SimRecords] = []
        self.num_simulated = 0  # distinct runs actually simulated

    def records(self, rule: StaticRule) -> SimRecords:
        """The run of ``rule`` (named after it): an earlier identical run, or a new one."""
        for rec in self._runs:
            asked = rec.was_policy_asked
            if np.array_equal(rule_decisions(rule, rec)[asked], rec.is_disaggregated[asked]):
                return rec if rec.policy == rule.name else replace(rec, policy=rule.name)
        rec = self._simulate(rule)
        self.num_simulated += 1
        self._runs.append(rec)
        return rec


def pick_best(candidates: Sequence[tuple[str, PolicyMetrics]]) -> tuple[str, PolicyMetrics]:
    """The ``(setting, metrics)`` with the best goodput; near-ties by TTFT p99, then order."""
    if not candidates:
        raise ValueError("no candidate to pick from")  # a caller bug: the grid is never empty
    best_goodput = max(m.goodput_rps for _, m in candidates)
    floor = best_goodput - abs(best_goodput) * GOODPUT_TIE
    tied = [(s, m) for s, m in candidates if m.goodput_rps >= floor]
    return min(tied, key=lambda sm: np.inf if sm[1].ttft_ms.p99 is None else sm[1].ttft_ms.p99)


def best_static_metrics(
    entry: BestStatic, runs: StaticRuns, summarize: Callable[[SimRecords], PolicyMetrics]
) -> tuple[PolicyMetrics, SimRecords]:
    """Run ``entry``'s grid through ``runs`` and return the winner's metrics (named
    ``entry.name``, its rule as the setting) and its records."""
    scored: list[tuple[str, PolicyMetrics]] = []
    by_setting: dict[str, SimRecords] = {}
    for rule in entry.rules():
        setting = rule_setting(rule)
        rec = runs.records(rule)
        by_setting[setting] = rec
        scored.append((setting, summarize(rec)))
    setting, metrics = pick_best(scored)
    return replace(metrics, policy=entry.name, setting=setting), by_setting[setting]
