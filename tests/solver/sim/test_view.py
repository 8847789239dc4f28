"""The gateway's view: every field equals a brute-force recount of the fleet at each arrival.

A recording policy holds the run's live state and, when asked, recounts each field by scanning
the engines, their queues and the prefill pool; the simulator keeps the same figures as
counters. Runs with one event per engine step give the reference step numbers; decode runs
must show the same views.
"""

from __future__ import annotations

import numpy as np
import pytest

from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED
from solver.profile_result import ProfileResult
from solver.sim import (
    ClusterSimulation,
    FleetConfig,
    PolicyAnswer,
    RouteView,
    SimRecords,
    SloLimits,
    Workload,
    parse_length_spec,
    poisson_workload,
)
from solver.sim.batching_gpu import PREFILL_RATE_WINDOW_MS, BatchingGpu
from solver.sim.events import RunState
from solver.sim.latency import StepLatency
from solver.sim.records import RECORDED_VIEW_FIELDS, VIEW_ROW
from tests.solver.sim.profiles import linear_fleet


def context_by_scan(gpu: BatchingGpu, step: int) -> int:
    """KV tokens of the decode batch in step ``step``: prompt + steps since joining, summed."""
    return sum(gpu.prompt[rid] + step - joined for _, rid, joined in gpu.finish_heap)


def step_in_flight(gpu: BatchingGpu, t: float) -> int:
    """The step running at ``t``, by a linear scan of a run's step ends."""
    if gpu.run_ends is None:
        return gpu.step_count
    k = 0
    while k < len(gpu.run_ends) - 1 and gpu.run_ends[k] <= t:
        k += 1
    return gpu.run_start + k + 1


class Recount:
    """Answers by a fixed pattern; records each view and a recount of it from the live state."""

    name = "recount"

    def __init__(self) -> None:
        self.state: RunState | None = None
        self.views: list[RouteView] = []
        self.recounts: list[dict[str, float | None]] = []
        self.infeasible: list[bool] = []  # the answers' "no path meets the targets"

    def decide(self, view: RouteView) -> PolicyAnswer:
        state = self.state
        if state is None:
            raise RuntimeError("the test did not attach the run state")
        rid = len(self.views)
        t = state.arrival_ms[rid]
        pools = (state.colloc_pool, state.decode_pool)
        colloc, target = (
            min(pool, key=lambda g: (g.num_assigned, g.index)) if pool else None for pool in pools
        )
        if state.fleet.topology == "conditional":
            target = colloc
        queued = [r for queue in state.pool.queues for r in queue]
        # Prefills running now: a prefill-end event of theirs is queued.
        in_prefill = [r for _, _, kind, _, r in state.heap if kind == 1]
        recount: dict[str, float | None] = {
            "prefill_queue_requests": len(queued),
            "prefill_queue_tokens": sum(state.prompt[r] for r in queued),
            "prefill_running_requests": len(in_prefill),
            "system_load": colloc.num_decoding if colloc else 0,
            "decode_batch_size": target.num_decoding if target else 0,
            "colloc_context_tokens": context_by_scan(colloc, step_in_flight(colloc, t)) if colloc else 0,
            "decode_context_tokens": context_by_scan(target, step_in_flight(target, t)) if target else 0,
            "colloc_num_waiting": len(colloc.waiting) if colloc else 0,
            "pending_prefill_tokens": (
                sum(length - done for _, done, length in colloc.prefill_queue)
                + sum(state.prompt[r] for r, needs_prefill in colloc.waiting if needs_prefill)
                if colloc
                else 0
            ),
        }
        recount["decode_pending_prefill_tokens"] = (
            sum(length - done for _, done, length in target.prefill_queue)
            + sum(state.prompt[r] for r, needs_prefill in target.waiting if needs_prefill)
            if target
            else 0
        )
        recount["prefill_running_tokens"] = sum(state.prompt[r] for r in in_prefill)
        # Each pending prompt's tokens left at their mean position, d + r / 2, weighted by r (no caches).
        left: list[tuple[int, int]] = []
        if colloc is not None:
            left = [(length - done, done) for _, done, length in colloc.prefill_queue]
            left += [(state.prompt[r], 0) for r, needs_prefill in colloc.waiting if needs_prefill]
        pairs = 0.0
        for r, d in left:
            pairs += r * (d + 0.5 * r)
        recount["pending_prefill_prefix_tokens"] = pairs / sum(r for r, _ in left) if left else 0.0
        recount["pending_prefill_requests"] = len(left)

        def feasible_routes(gpu: BatchingGpu | None) -> int | None:
            """Earlier requests routed to ``gpu`` in the last two seconds, answered feasible or
            with their first token by now within the 800 ms TTFT target."""
            if gpu is None:
                return None
            return sum(
                1
                for j in range(rid)
                if state.dest[j] == gpu.index
                and state.arrival_ms[j] > t - PREFILL_RATE_WINDOW_MS
                and (not self.infeasible[j] or state.first_token[j] - state.arrival_ms[j] <= 800.0)
            )

        # Prompt tokens routed to the pool in the last two seconds, where its GPUs batch prompts.
        batch_tokens = state.fleet.prefill_batch_tokens
        recount["prefill_arrival_tokens_per_s"] = (
            sum(
                state.prompt[j]
                for j in range(rid)
                if state.is_disagg[j] and state.arrival_ms[j] > t - PREFILL_RATE_WINDOW_MS
            )
            * 1000.0
            / PREFILL_RATE_WINDOW_MS
            if batch_tokens
            else None
        )
        recount["prefill_step_tokens"] = batch_tokens or None
        recount["colloc_feasible_routes"] = feasible_routes(colloc)
        recount["decode_feasible_routes"] = feasible_routes(target)
        self.views.append(view)
        self.recounts.append(recount)
        infeasible = rid % 5 == 0
        self.infeasible.append(infeasible)
        if rid % 3 == 0 or view.prompt_len > 1500:
            return PolicyAnswer(DISAGGREGATED, is_infeasible=infeasible)
        return PolicyAnswer(COLLOCATED, is_infeasible=infeasible)


def run_recount(
    profile: ProfileResult, fleet: FleetConfig, workload: Workload, use_runs: bool
) -> tuple[Recount, SimRecords]:
    spy = Recount()
    sim = ClusterSimulation(fleet, StepLatency(profile), spy, use_runs=use_runs, slo=SloLimits(800.0, 40.0))
    state = sim.prepare(workload, workload.output_len)
    spy.state = state
    state.run()
    return spy, state.records(spy.name)


FLEETS = [
    linear_fleet(num_prefill=2, num_decode=3, max_num_seqs=5, max_num_batched_tokens=256),
    linear_fleet(
        num_prefill=2, num_decode=3, max_num_seqs=5, max_num_batched_tokens=256, prefill_batch_tokens=2048
    ),
    linear_fleet(
        "pools", num_prefill=2, num_decode=2, num_mixed=2, max_num_seqs=4, max_num_batched_tokens=128
    ),
]


@pytest.fixture(scope="module")
def busy() -> Workload:
    return poisson_workload(700, 60.0, parse_length_spec("lognormal:900,80"), seed=8)


@pytest.mark.parametrize("fleet", FLEETS, ids=["conditional", "conditional-batching", "pools"])
def test_every_view_field_equals_a_recount(
    profile: ProfileResult, fleet: FleetConfig, busy: Workload
) -> None:
    views = {}
    for use_runs in (False, True):
        spy, rec = run_recount(profile, fleet, busy, use_runs)
        assert len(spy.views) == busy.num_requests
        for i, (view, recount) in enumerate(zip(spy.views, spy.recounts, strict=True)):
            got = {name: getattr(view, name) for name in recount}
            assert got == recount, i
            assert view.prefill_pool_gpus == 2 and view.chunk_size == fleet.max_num_batched_tokens
            assert (view.ttft_slo_ms, view.tpot_slo_ms) == (800.0, 40.0)
        for name in RECORDED_VIEW_FIELDS:  # the records hold what the policy saw
            assert getattr(rec, name).tolist() == [getattr(v, name) for v in spy.views], name
        views[use_runs] = spy.views
    assert views[False] == views[True]  # decode runs change no view
    # The fields were exercised: queues, waiting lines and pending prompts did build up.
    seen = views[True]
    for name in ("prefill_queue_tokens", "prefill_running_tokens", "colloc_num_waiting"):
        assert max(getattr(v, name) for v in seen) > 0, name
    assert max(v.pending_prefill_tokens for v in seen) > fleet.max_num_batched_tokens
    assert max(v.pending_prefill_prefix_tokens for v in seen) > fleet.max_num_batched_tokens
    assert max(v.pending_prefill_requests for v in seen) > 1
    if fleet.prefill_batch_tokens:
        assert max(v.prefill_arrival_tokens_per_s or 0.0 for v in seen) > 0.0
    assert max(v.colloc_context_tokens for v in seen) > 0
    assert max(v.decode_context_tokens for v in seen) > 0
    assert min(v.colloc_feasible_routes or 0 for v in seen) == 0  # an idle start, and ...
    assert max(v.colloc_feasible_routes or 0 for v in seen) > 3  # ... requests in flight or just done


def test_view_row_order_matches_route_view() -> None:
    names = list(RouteView._fields)
    assert tuple(names[: len(VIEW_ROW)]) == VIEW_ROW
    assert names[len(VIEW_ROW) :] == [
        "ttft_slo_ms",
        "tpot_slo_ms",
        "colloc_prefill_tokens_per_s",
        "decode_prefill_tokens_per_s",
        "cached_prompt_tokens",  # 0 here: no block hashes (tests/solver/sim/test_prefix_reuse.py)
        "prefill_running_elapsed_ms",  # None: the simulated gateway does not report it
        "colloc_tpot_slack_ms",  # None: neither
        "colloc_feasible_routes",  # recounted above (None without a TTFT target)
        "decode_feasible_routes",
        "colloc_cached_prompt_tokens",  # None here, as cached_prompt_tokens (test_prefix_reuse.py)
        "prefill_cached_prompt_tokens",  # None here too
        "pending_prefill_prefix_tokens",  # 0.0 with nothing pending (test_batching_gpu.py)
        "pending_prefill_requests",
        "prefill_arrival_tokens_per_s",  # None here: one prompt a pass (recounted above where batched)
        "prefill_step_tokens",
        "colloc_arrivals_per_s",  # None: the simulated gateway does not report it
        "colloc_tpot_slack2_ms",  # None: nor the least
    ]


def test_context_of_one_decode_grows_by_one_token_per_step(profile: ProfileResult) -> None:
    # A alone decodes; B's arrival sees A's context: prompt + steps since A joined the batch.
    wl = Workload(np.array([0.0, 1.0]), np.array([300, 10]), np.array([500, 2]))
    spy, rec = run_recount(profile, linear_fleet(num_prefill=1, num_decode=1), wl, True)
    view = spy.views[1]
    assert view.system_load == 1 and rec.is_disaggregated.tolist() == [True, False]
    # At 1 s, A has run about (1000 - TTFT) / 6-7 ms steps: its context is well above its prompt.
    steps = (1000.0 - rec.ttft_ms[0]) / 7.0
    assert 300 + 0.8 * steps < view.colloc_context_tokens < 300 + 1.2 * steps
    assert view.colloc_context_tokens == view.decode_context_tokens  # one GPU: both views agree
