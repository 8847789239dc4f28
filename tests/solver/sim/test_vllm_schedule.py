"""The engines schedule as vLLM's v1 scheduler does: hand-computed step sequences per rule.

Rules (``solver.sim.batching_gpu``, ``solver.sim.prefill_pool``): the token budget covers the
step's decode tokens and its prefill chunk (decodes first); each chunk is its own pass, with the
pass's fixed cost and its work over the prefix; a disaggregated request's first token comes from
the decode engine two step boundaries after its KV lands; the prefill pool's three queues.
"""

from __future__ import annotations

import numpy as np
import pytest

from pdroute_core.routing.types import DISAGGREGATED
from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    ClusterSimulation,
    FleetConfig,
    PolicyAnswer,
    RouteView,
    SimRecords,
    Workload,
)
from solver.sim.latency import StepLatency
from solver.sim.prefill_pool import PrefillPool
from tests.solver.sim import profiles as P


def run(
    latency: StepLatency, fleet: FleetConfig, disagg: bool, wl: Workload, use_runs: bool = True
) -> SimRecords:
    policy = AlwaysDisaggregated() if disagg else AlwaysCollocated()
    return ClusterSimulation(fleet, latency, policy, use_runs=use_runs).run(wl, wl.output_len)


class LongPromptsApart(AlwaysCollocated):
    """Disaggregates the 1,024-token prompts, collocates the rest."""

    name = "long-apart"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return PolicyAnswer(DISAGGREGATED) if view.prompt_len == 1024 else super().decide(view)


@pytest.mark.parametrize("use_runs", [False, True])
def test_a_decode_beside_a_budget_sized_prompt_leaves_a_one_token_tail(
    latency: StepLatency, use_runs: bool
) -> None:
    # A (128-token prompt) decodes alone; B, exactly one budget (512 tokens), arrives at 50 ms.
    fleet = FleetConfig(num_prefill=0, num_decode=1, max_num_batched_tokens=512)
    wl = Workload(np.array([0.0, 0.05]), np.array([128, 512]), np.array([400, 2]))
    t, j = P.prefill_formula_ms(128), 0
    while t <= 50.0:  # A's decode steps until the one in flight at 50 ms ends
        j += 1
        t += P.decode_formula_ms(128 + j, 1)
    # Step 1: A's decode token and 511 of B's tokens (the budget minus the running decode).
    step1 = P.decode_formula_ms(128 + j + 1, 1) + P.interference_formula_ms(511, 1)
    # Step 2: A's decode and B's last token, a whole pass (the synthetic prefill is linear, so
    # the one token's work over its 511-token prefix adds nothing to T_interference).
    step2 = P.decode_formula_ms(128 + j + 2, 1) + P.interference_formula_ms(1, 1)
    rec = run(latency, fleet, False, wl, use_runs)
    assert rec.ttft_ms[1] == pytest.approx(t + step1 + step2 - 50.0, rel=1e-12)
    # Both then decode together; B's one decode step is its last.
    kv_mean = ((128 + j + 3) + (512 + 1)) / 2
    last = t + step1 + step2 + P.decode_formula_ms(kv_mean, 2)
    assert rec.e2e_ms[1] == pytest.approx(last - 50.0, rel=1e-12)


def test_a_prompt_chunked_on_an_idle_gpu_pays_one_pass_per_chunk() -> None:
    latency = StepLatency(P.make_convex_profile())
    fleet = FleetConfig(num_prefill=0, num_decode=1, max_num_batched_tokens=512)
    rec = run(latency, fleet, False, Workload(np.array([0.0]), np.array([1300]), np.array([1])))
    # Chunks 512 + 512 + 276. Pass 1: T(512) = 11. Pass 2: T(1024) - T(512) + 2 = 17 (the fixed
    # cost 2 ms, module test_latency). Pass 3: T(1300) - T(1024) + 2 with T(1300) = 26 + 276 *
    # 24/1024 = 32.46875, so 8.46875 (above T(276) = 7 + 20 * 4/256 = 7.3125).
    assert rec.ttft_ms[0] == pytest.approx(11.0 + 17.0 + 8.46875, rel=1e-12)
    assert rec.ttft_ms[0] > latency.prefill_ms(1300)  # more than one unchunked pass (32.47 ms)
    assert rec.num_engine_steps == 3


def test_a_budget_sized_prompt_on_an_idle_gpu_is_one_pass(
    profile: ProfileResult, latency: StepLatency
) -> None:
    fleet = FleetConfig(num_prefill=0, num_decode=1, max_num_batched_tokens=512)
    rec = run(latency, fleet, False, Workload(np.array([0.0]), np.array([512]), np.array([1])))
    assert rec.ttft_ms[0] == profile.T_prefill[512] and rec.num_engine_steps == 1


@pytest.mark.parametrize("use_runs", [False, True])
def test_a_disaggregated_request_waits_two_step_boundaries_on_a_busy_decode_engine(
    latency: StepLatency, use_runs: bool
) -> None:
    # A (collocated, 128 tokens) decodes on the one decode GPU; B (1,024 tokens) is prefilled on
    # the prefill GPU and its KV lands during one of A's steps.
    fleet = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=512)
    prefill_b = P.prefill_formula_ms(1024)
    landed = 20.0 + prefill_b + latency.transfer_ms(1024)
    t, j = P.prefill_formula_ms(128), 0
    while t <= landed:  # A's steps until the one in flight when B's KV lands ends
        j += 1
        t += P.decode_formula_ms(128 + j, 1)
    admitted = t  # boundary 1: admitted
    seen = admitted + P.decode_formula_ms(128 + j + 1, 1)  # boundary 2: its KV seen
    # Its first decode step: A's context 128 + j + 2, B's the prompt (its last token computed).
    first = seen + P.decode_formula_ms(((128 + j + 2) + 1024) / 2, 2)
    second = first + P.decode_formula_ms(((128 + j + 3) + 1025) / 2, 2)

    wl = Workload(np.array([0.0, 0.02]), np.array([128, 1024]), np.array([400, 3]))
    rec = ClusterSimulation(fleet, latency, LongPromptsApart(), use_runs=use_runs).run(wl, wl.output_len)
    assert rec.is_disaggregated.tolist() == [False, True]
    assert rec.ttft_ms[1] == pytest.approx(first - 20.0, rel=1e-12)
    assert rec.e2e_ms[1] == pytest.approx(
        second + P.decode_formula_ms(((128 + j + 4) + 1026) / 2, 2) - 20.0, rel=1e-12
    )
    assert rec.tokens_generated.tolist() == [400, 3]
    # A proxy streaming the prefill engine's token sees it when B's prefill pass ends.
    proxy = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=512, first_token="prefill-engine")
    rec2 = ClusterSimulation(proxy, latency, LongPromptsApart(), use_runs=use_runs).run(wl, wl.output_len)
    assert rec2.ttft_ms[1] == pytest.approx(prefill_b, rel=1e-12)
    assert rec2.finish_ms[1] == rec.finish_ms[1]


@pytest.mark.parametrize("use_runs", [False, True])
def test_a_transfer_waits_behind_the_prompts_queued_before_it_on_its_decode_gpu(
    latency: StepLatency, use_runs: bool
) -> None:
    # A (1,536 tokens, collocated) is chunked 256 tokens a step on the one decode GPU from 0 ms;
    # B (1,024 tokens) is prefilled on the prefill GPU and its KV lands during A's fourth chunk.
    # vLLM takes its waiting line in order while a step's budget lasts: every chunk of A fills
    # the budget, so B is admitted at the boundary after A's last chunk, seen one step later
    # (A's one decode step), and its first decode step makes its first token.
    fleet = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=256)
    wl = Workload(np.array([0.0, 0.0]), np.array([1536, 1024]), np.array([2, 3]))
    rec = ClusterSimulation(fleet, latency, LongPromptsApart(), use_runs=use_runs).run(wl, wl.output_len)
    landed = P.prefill_formula_ms(1024) + latency.transfer_ms(1024)
    a_prefilled = rec.first_token_ms[0]
    assert rec.is_disaggregated.tolist() == [False, True]
    assert landed < a_prefilled - 30.0  # it landed before A's last two chunks
    first = a_prefilled + P.decode_formula_ms(1537, 1) + P.decode_formula_ms(1024, 1)
    assert rec.first_token_ms[1] == pytest.approx(first, rel=1e-12)
    assert rec.tokens_generated.tolist() == [2, 3]


@pytest.mark.parametrize("use_runs", [False, True])
@pytest.mark.parametrize("c_after_landing", [False, True])
def test_the_transfer_and_the_prompts_share_one_line_in_arrival_order(
    latency: StepLatency, use_runs: bool, c_after_landing: bool
) -> None:
    # As above, with C (1,536 tokens, collocated) reaching the GPU before B's KV lands or after
    # it (while B waits behind A): B is admitted before C starts only in the second case.
    fleet = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=256)
    landed = P.prefill_formula_ms(1024) + latency.transfer_ms(1024)
    c_at = landed + 1.0 if c_after_landing else landed - 20.0
    wl = Workload(np.array([0.0, 0.0, c_at / 1000.0]), np.array([1536, 1024, 1536]), np.array([2, 3, 2]))
    rec = ClusterSimulation(fleet, latency, LongPromptsApart(), use_runs=use_runs).run(wl, wl.output_len)
    assert rec.is_disaggregated.tolist() == [False, True, False]
    assert c_at < rec.first_token_ms[0]  # C reached the GPU while A was still being chunked
    assert (rec.first_token_ms[1] < rec.first_token_ms[2]) == c_after_landing


def test_a_one_token_answer_streamed_from_the_prefill_engine_never_reaches_a_decode_gpu(
    latency: StepLatency,
) -> None:
    fleet = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=512, first_token="prefill-engine")
    rec = run(latency, fleet, True, Workload(np.array([0.0]), np.array([1024]), np.array([1])))
    assert rec.e2e_ms[0] == rec.ttft_ms[0] == pytest.approx(P.prefill_formula_ms(1024), rel=1e-12)
    assert rec.num_engine_steps == 0 and rec.total_tokens_generated == 1


# Prefill queues. Convex profile: T(64) = 4, T(1024) = 26, T(2048) = 50 ms; first token read at
# the prefill engine and one-token outputs, so TTFT is the prefill's end.
def queue_run(discipline: str, arrivals_s: list[float], prompts: list[int]) -> list[float]:
    fleet = FleetConfig(
        num_prefill=2,
        num_decode=1,
        max_num_batched_tokens=512,
        prefill_queue=discipline,
        first_token="prefill-engine",
    )
    wl = Workload(np.array(arrivals_s), np.array(prompts), np.ones(len(prompts), dtype=np.int64))
    rec = run(StepLatency(P.make_convex_profile()), fleet, True, wl)
    return [float(t) for t in rec.first_token_ms]  # ms from the first arrival, at 0


@pytest.mark.parametrize(
    ("discipline", "ends"),
    [
        # Shared: r2 takes worker 1 when r1 ends (4 ms), r3 worker 0 when r0 ends (26 ms).
        ("shared", [26.0, 4.0, 30.0, 30.0]),
        # Round-robin: r2 placed behind r0 on worker 0 (26 + 26), r3 behind r1 on worker 1.
        ("round-robin", [26.0, 4.0, 52.0, 8.0]),
        # Least-loaded: r2 to worker 1 (64 tokens < 1,024), r3 to worker 0 (1,024 < 1,088).
        ("least-loaded", [26.0, 4.0, 30.0, 30.0]),
    ],
)
def test_prefill_queues_serve_four_prompts_as_hand_computed(discipline: str, ends: list[float]) -> None:
    assert queue_run(discipline, [0.0, 0.0, 0.0, 0.0], [1024, 64, 1024, 64]) == pytest.approx(ends, rel=1e-12)


@pytest.mark.parametrize(
    ("discipline", "ends"),
    [
        # r0 (2,048) runs 0-50 on worker 0, r1 (1,024) 49-75 on worker 1. At 49.5 ms r2 (64):
        ("shared", [50.0, 75.0, 54.0]),  # the first worker free: worker 0 at 50 ms
        ("round-robin", [50.0, 75.0, 54.0]),  # its turn: worker 0, behind r0's last 0.5 ms
        ("least-loaded", [50.0, 75.0, 79.0]),  # fewer tokens on worker 1 (1,024 < 2,048): behind r1
    ],
)
def test_least_loaded_placement_counts_tokens_not_time_left(discipline: str, ends: list[float]) -> None:
    assert queue_run(discipline, [0.0, 0.049, 0.0495], [2048, 1024, 64]) == pytest.approx(ends, rel=1e-9)


@pytest.mark.parametrize(
    ("budget", "ends"),
    [
        # One prompt a pass: r0 0-26, then r1 +4, r2 +11, r3 +26, r4 +4.
        (0, [26.0, 30.0, 41.0, 67.0, 71.0]),
        # r1-r4 (1,664 tokens) fit one pass at 26 ms: each prompt's pass, the fixed 2 ms paid once
        # (4 + 9 + 24 + 2 = 39 ms), all four out at its end.
        (2048, [26.0, 65.0, 65.0, 65.0, 65.0]),
        # 1,000 tokens: r1 + r2 (576) in one pass (13 ms); r3 does not fit beside them, nor r4
        # beside r3 (1,088): first come, first served, no skipping ahead.
        (1000, [26.0, 39.0, 39.0, 65.0, 69.0]),
    ],
)
def test_a_prefill_gpu_with_a_token_budget_runs_the_waiting_prompts_that_fit_in_one_pass(
    budget: int, ends: list[float]
) -> None:
    fleet = FleetConfig(
        num_prefill=1,
        num_decode=1,
        max_num_batched_tokens=512,
        first_token="prefill-engine",
        prefill_batch_tokens=budget,
    )
    lat = StepLatency(P.make_convex_profile())
    assert lat.pass_fixed_ms == 2.0  # the line through (1024, 26) and (2048, 50) meets 0 at 2 ms
    prompts = [1024, 64, 512, 1024, 64]
    wl = Workload(np.array([0.0] + [0.001] * 4), np.array(prompts), np.ones(5, dtype=np.int64))
    rec = run(lat, fleet, True, wl)
    assert [float(t) for t in rec.first_token_ms] == pytest.approx(ends, rel=1e-12)
    assert rec.num_prefill_forwards == {0: 5, 2048: 2, 1000: 4}[budget]


def test_the_pool_counts_a_passs_prompts_running_until_the_last_ends() -> None:
    pool = PrefillPool(1, "shared", [100, 30, 50, 900], batch_tokens=200)
    for r in range(4):
        pool.place(r)
    assert pool.take_startable() == [(0, 0), (0, 1), (0, 2)]  # 180 tokens; r3 does not fit
    assert (pool.num_running, pool.running_tokens, pool.num_queued) == (3, 180, 1)
    pool.finish(0, 0)
    pool.finish(0, 1)
    assert pool.take_startable() == []  # the pass has not ended: the worker is busy
    pool.finish(0, 2)
    assert pool.take_startable() == [(0, 3)]  # alone: the head always goes


def test_a_negative_prefill_budget_is_refused() -> None:
    with pytest.raises(InvalidSimConfig, match="prefill_batch_tokens"):
        FleetConfig(prefill_batch_tokens=-1)


def test_the_pool_counters_follow_placement_start_and_finish() -> None:
    pool = PrefillPool(2, "least-loaded", [100, 30, 50])
    assert [pool.place(r) for r in (0, 1, 2)] == [0, 1, 1]
    assert (pool.num_queued, pool.queued_tokens) == (3, 180)
    assert pool.take_startable() == [(0, 0), (1, 1)]
    assert (pool.num_queued, pool.queued_tokens, pool.num_running, pool.running_tokens) == (1, 50, 2, 130)
    pool.finish(1, 1)
    assert pool.take_startable() == [(1, 2)]
    assert (pool.num_queued, pool.num_running, pool.running_tokens) == (0, 2, 150)


def test_topology_defaults_name_their_routers() -> None:
    assert FleetConfig().prefill_queue_discipline == "round-robin"
    assert FleetConfig("pools", 2, 4, 2).prefill_queue_discipline == "least-loaded"
    assert FleetConfig(prefill_queue="shared").prefill_queue_discipline == "shared"


@pytest.mark.parametrize(
    ("discipline", "waits"),
    [
        ("shared", [0.0, 0.0, 4.0, 26.0]),  # r2 takes the first worker free (r1's at 4 ms), r3 r0's
        ("round-robin", [0.0, 0.0, 26.0, 4.0]),  # r2 behind r0 on worker 0, r3 behind r1
    ],
)
def test_the_records_keep_each_prompts_wait_for_a_prefill_gpu(discipline: str, waits: list[float]) -> None:
    fleet = FleetConfig(num_prefill=2, num_decode=1, prefill_queue=discipline, first_token="prefill-engine")
    wl = Workload(np.zeros(4), np.array([1024, 64, 1024, 64]), np.ones(4, dtype=np.int64))
    rec = run(StepLatency(P.make_convex_profile()), fleet, True, wl)
    assert rec.prefill_wait_ms.tolist() == pytest.approx(waits, rel=1e-12)


def test_a_collocated_request_has_no_prefill_wait(latency: StepLatency) -> None:
    fleet = FleetConfig(num_prefill=1, num_decode=1, max_num_batched_tokens=512)
    wl = Workload(np.array([0.0]), np.array([100]), np.array([3]))
    rec = ClusterSimulation(fleet, latency, AlwaysCollocated()).run(wl, wl.output_len)
    assert np.isnan(rec.prefill_wait_ms[0]) and not np.isnan(rec.ttft_ms[0])
