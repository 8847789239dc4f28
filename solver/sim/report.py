"""Metrics of a run (latency percentiles, throughput, goodput) and their table and JSON forms.

Definitions (``SimRecords`` gives TTFT, end-to-end latency and TPOT per request):

- percentiles are numpy's linear-interpolation percentiles over the requests of one run;
  TPOT statistics leave out one-token outputs (no time per output token exists for them);
- throughput = finished requests / makespan, and output tokens / makespan, where the makespan
  runs from the first arrival to the last finish;
- goodput = requests meeting both ``ttft_ms <= ttft_limit_ms`` and ``tpot_ms <= tpot_limit_ms``
  (one-token outputs need only the TTFT limit) / makespan; ``slo_attainment`` is their share;
- ``share_disaggregated`` = requests that took the disaggregated path / all requests;
- shed requests (dropped by the gateway on an infeasible answer, ``shed=True``) count in the
  denominator of ``slo_attainment`` and as misses in goodput, not in throughput (finished
  requests), and have no latency, so the percentiles are over the served requests only;
  ``share_shed`` is their share, ``share_infeasible`` the share of infeasible answers (shed or
  not);
- ``ttft_error`` / ``e2e_error``: the policy's prediction error (``solver.sim.accuracy``);
- prefix caches (None when the run had none): ``prefix_hit_token_share`` = prompt tokens the
  prefill skipped thanks to a cache hit / prompt tokens, over the served requests;
  ``prefix_hit_request_share`` = share of served requests with a hit where they prefilled;
- ``num_passes``: forward passes run (engine steps and prefill-pool passes), of which
  ``num_extrapolated_passes`` read a table beyond the profile's measured range, per table in
  ``extrapolated`` (only when the run was allowed to, ``allow_extrapolation``; otherwise it was
  refused up front, ``solver.sim.extrapolation``);
- ``num_preemptions`` / ``num_recomputed_tokens``: recompute preemptions on the engine GPUs
  under a finite KV capacity (``kv_capacity_tokens``, None: unlimited) and the KV tokens they
  discarded, prefilled again (``solver.sim.kv_pool``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidSimConfig
from solver.sim.accuracy import PredictionError, format_error_markdown, format_error_table
from solver.sim.records import SimRecords


@dataclass(frozen=True)
class SloLimits:
    """The user's latency limits for goodput (ms)."""

    ttft_ms: float = 1000.0
    tpot_ms: float = 50.0

    def __post_init__(self) -> None:
        if not (self.ttft_ms > 0 and self.tpot_ms > 0):
            raise InvalidSimConfig("SLO limits must be > 0 ms")


@dataclass(frozen=True)
class LatencyStats:
    """Mean and percentiles of one latency (ms); None when no request defines it."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: npt.NDArray[np.float64]) -> LatencyStats:
        v = values[np.isfinite(values)]
        if v.size == 0:
            return cls(None, None, None, None)
        p50, p90, p99 = np.percentile(v, [50, 90, 99]).tolist()
        return cls(float(np.mean(v)), p50, p90, p99)


@dataclass(frozen=True)
class PolicyMetrics:
    """One policy at one offered load."""

    policy: str
    offered_rate: float  # requests/s offered by the (scaled) workload
    num_requests: int
    e2e_ms: LatencyStats
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    throughput_rps: float  # finished requests per second of makespan
    throughput_tokens_per_s: float  # output tokens per second of makespan
    goodput_rps: float  # requests meeting both SLO limits per second of makespan
    slo_attainment: float  # share of requests meeting both limits
    share_disaggregated: float
    makespan_s: float
    share_shed: float  # requests dropped by the gateway on an infeasible answer
    share_infeasible: float  # requests the policy answered "no path meets the SLO"
    ttft_error: PredictionError | None  # None: the policy does not predict
    e2e_error: PredictionError | None
    setting: str | None = None  # the rule a hindsight-tuned entry chose at this load
    num_passes: int = 0  # engine steps plus prefill-pool passes
    prefix_hit_token_share: float | None = None  # prompt tokens not prefilled (a cache hit) / all
    prefix_hit_request_share: float | None = None  # requests with a hit where they prefilled
    num_extrapolated_passes: int = 0  # of them, with a lookup beyond a table's measured range
    extrapolated: dict[str, int] = field(default_factory=dict)  # per table: passes beyond it
    allow_extrapolation: bool = False  # whether the run was allowed beyond the measured ranges
    kv_capacity_tokens: int | None = None  # KV tokens per engine GPU (None: unlimited)
    num_preemptions: int = 0  # recompute preemptions (KV capacity)
    num_recomputed_tokens: int = 0  # KV tokens the preemptions discarded, prefilled again

    @property
    def label(self) -> str:
        """The policy's name, with its chosen setting in brackets when it has one."""
        return self.policy if self.setting is None else f"{self.policy}[{self.setting}]"

    def to_json_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def summarize(records: SimRecords, offered_rate: float, slo: SloLimits) -> PolicyMetrics:
    """The metrics of one run (see the module docstring)."""
    ttft = records.ttft_ms
    tpot = records.tpot_ms
    makespan_s = records.makespan_ms / 1000.0
    meets = (ttft <= slo.ttft_ms) & (np.isnan(tpot) | (tpot <= slo.tpot_ms))
    n = records.num_requests
    served = ~records.is_shed
    per_s = (lambda count: count / makespan_s) if makespan_s > 0 else (lambda count: float("nan"))
    e2e = records.e2e_ms
    hit_tokens = hit_requests = None
    if records.prefix_hit_tokens is not None:
        skipped = records.prefix_hit_tokens[served]
        prompt_total = float(np.sum(records.prompt_len[served]))
        hit_tokens = float(np.sum(skipped)) / prompt_total if prompt_total else 0.0
        hit_requests = float(np.count_nonzero(skipped)) / skipped.size if skipped.size else 0.0
    return PolicyMetrics(
        policy=records.policy,
        offered_rate=offered_rate,
        num_requests=n,
        e2e_ms=LatencyStats.of(e2e),
        ttft_ms=LatencyStats.of(ttft),
        tpot_ms=LatencyStats.of(tpot),
        throughput_rps=per_s(records.num_served),
        throughput_tokens_per_s=per_s(float(np.sum(records.output_len[served]))),
        goodput_rps=per_s(float(np.count_nonzero(meets))),
        slo_attainment=float(np.count_nonzero(meets)) / n,
        share_disaggregated=float(np.count_nonzero(records.is_disaggregated)) / n,
        makespan_s=makespan_s,
        share_shed=float(np.count_nonzero(records.is_shed)) / n,
        share_infeasible=float(np.count_nonzero(records.is_infeasible)) / n,
        ttft_error=PredictionError.of(records.predicted_ttft_ms, ttft),
        num_passes=records.num_engine_steps + records.num_prefill_forwards,
        num_extrapolated_passes=records.num_extrapolated_steps,
        extrapolated=dict(records.extrapolated),
        allow_extrapolation=records.allow_extrapolation,
        kv_capacity_tokens=records.kv_capacity_tokens,
        num_preemptions=records.num_preemptions,
        num_recomputed_tokens=records.num_recomputed_tokens,
        e2e_error=PredictionError.of(records.predicted_e2e_ms, e2e),
        prefix_hit_token_share=hit_tokens,
        prefix_hit_request_share=hit_requests,
    )


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:,.{digits}f}"


TABLE_COLUMNS = (
    ("policy", 15),
    ("rate/s", 7),
    ("e2e p50", 8),
    ("e2e p99", 8),
    ("TTFT p50", 8),
    ("TTFT p99", 8),
    ("TPOT p50", 8),
    ("TPOT p99", 8),
    ("thr/s", 7),
    ("good/s", 7),
    ("SLO %", 6),
    ("shed %", 6),
    ("disagg %", 8),
)
# Shown when a row ran with prefix caches: the token and request hit shares (%).
CACHE_COLUMNS = (("hit tok %", 9), ("hit req %", 9))


def _columns(metrics: Sequence[PolicyMetrics]) -> tuple[tuple[str, int], ...]:
    """The table's columns: the cache columns only when some row had prefix caches."""
    has_cache = any(m.prefix_hit_token_share is not None for m in metrics)
    return TABLE_COLUMNS + CACHE_COLUMNS if has_cache else TABLE_COLUMNS


def _cells(m: PolicyMetrics, num_columns: int = len(TABLE_COLUMNS)) -> tuple[str, ...]:
    cache: tuple[str, ...] = ()
    if num_columns > len(TABLE_COLUMNS):
        token_share, request_share = m.prefix_hit_token_share, m.prefix_hit_request_share
        cache = (
            _fmt(None if token_share is None else 100 * token_share, 1),
            _fmt(None if request_share is None else 100 * request_share, 1),
        )
    return (
        m.label,
        _fmt(m.offered_rate, 2),
        _fmt(m.e2e_ms.p50),
        _fmt(m.e2e_ms.p99),
        _fmt(m.ttft_ms.p50),
        _fmt(m.ttft_ms.p99),
        _fmt(m.tpot_ms.p50, 1),
        _fmt(m.tpot_ms.p99, 1),
        _fmt(m.throughput_rps, 2),
        _fmt(m.goodput_rps, 2),
        _fmt(100 * m.slo_attainment, 1),
        _fmt(100 * m.share_shed, 1),
        _fmt(100 * m.share_disaggregated, 1),
        *cache,
    )


def _line(cells: Sequence[str], first_width: int, columns: Sequence[tuple[str, int]] = TABLE_COLUMNS) -> str:
    widths = [first_width, *(w for _, w in columns[1:])]
    return "  ".join(
        c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def format_table(metrics: Sequence[PolicyMetrics]) -> str:
    """A fixed-width table (latencies in ms, rates in requests/s), one row per policy and load;
    below it, for the policies that predict, their prediction error (``solver.sim.accuracy``)."""
    columns = _columns(metrics)
    first = max([columns[0][1], *(len(m.label) for m in metrics)])
    header = _line([name for name, _ in columns], first, columns)
    lines = [header, "-" * len(header), *(_line(_cells(m, len(columns)), first, columns) for m in metrics)]
    errors = format_error_table(metrics)
    return "\n".join(lines) + (f"\n\nprediction error (chosen path)\n{errors}" if errors else "")


def format_markdown(metrics: Sequence[PolicyMetrics]) -> str:
    """The same tables in Markdown (for docs)."""
    columns = _columns(metrics)
    names = [name for name, _ in columns]
    rows = [
        "| " + " | ".join(names) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(names))) + "|",
    ]
    rows.extend("| " + " | ".join(_cells(m, len(columns))) + " |" for m in metrics)
    errors = format_error_markdown(metrics)
    return "\n".join(rows) + (f"\n\nPrediction error of the chosen path:\n\n{errors}" if errors else "")


def format_extrapolation(metrics: Sequence[PolicyMetrics]) -> str:
    """One line: how many forward passes read a table beyond its measured range, per table."""
    total = sum(m.num_passes for m in metrics)
    beyond = sum(m.num_extrapolated_passes for m in metrics)
    allowed = any(m.allow_extrapolation for m in metrics)
    if not beyond:
        within = "every lookup within the measured ranges"
        return f"extrapolated passes: none of {total:,} ({within}{'; allowed' if allowed else ''})"
    tables: dict[str, int] = {}
    for m in metrics:
        for name, count in m.extrapolated.items():
            tables[name] = tables.get(name, 0) + count
    per_table = ", ".join(f"{name} {count:,}" for name, count in tables.items() if count)
    worst = max(metrics, key=lambda m: m.num_extrapolated_passes / max(m.num_passes, 1))
    return (
        f"extrapolated passes (allowed; tables extended linearly beyond their measured ranges): "
        f"{beyond:,} of {total:,} ({100.0 * beyond / total:.2f} %; {per_table}); most in {worst.label} "
        f"at {worst.offered_rate:g}/s: {worst.num_extrapolated_passes:,} of {worst.num_passes:,}"
    )


def format_preemptions(metrics: Sequence[PolicyMetrics]) -> str | None:
    """One line on the KV capacity in force and its preemptions (None: unlimited capacity)."""
    capacities = {m.kv_capacity_tokens for m in metrics if m.kv_capacity_tokens is not None}
    if not capacities:
        return None
    cap = ", ".join(f"{c:,}" for c in sorted(capacities))
    count = sum(m.num_preemptions for m in metrics)
    if not count:
        return f"KV capacity {cap} tokens per engine GPU: no preemption"
    worst = max(metrics, key=lambda m: m.num_preemptions)
    tokens = sum(m.num_recomputed_tokens for m in metrics)
    return (
        f"KV capacity {cap} tokens per engine GPU: {count:,} preemptions (recompute), {tokens:,} tokens "
        f"prefilled again; most in {worst.label} at {worst.offered_rate:g}/s: {worst.num_preemptions:,}"
    )
