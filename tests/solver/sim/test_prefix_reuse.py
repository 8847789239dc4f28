"""Prefix caches in the fleet: what a hit saves, what is reported, and runs without reuse unchanged."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    ClusterSimulation,
    Policy,
    PolicyAnswer,
    PromptAndQueueThreshold,
    RouteView,
    SimRecords,
    SloLimits,
    Workload,
    make_policy,
    parse_length_spec,
    poisson_workload,
    simulate,
    summarize,
)
from solver.sim.block_hashes import BlockHashes, chain_hashes
from solver.sim.latency import StepLatency
from solver.sim.policies import ANSWER_COLLOCATED, ANSWER_DISAGGREGATED
from solver.sim.sessions import SHAPE_DEFAULTS, session_workload
from tests.solver.sim import profiles as P
from tests.solver.sim.profiles import linear_fleet

CACHE = 100_000
ONE_GPU = linear_fleet(num_prefill=0, num_decode=1, prefix_cache_tokens=CACHE)
ONE_PAIR = linear_fleet(num_prefill=1, num_decode=1, prefix_cache_tokens=CACHE)


def same_prompt_twice(prompt_len: int, output_len: int, gap_s: float = 10.0) -> Workload:
    """Two requests with one prompt (token ids 0..L-1), the second after the first finished."""
    chain = chain_hashes(np.arange(prompt_len + output_len), 16)
    blocks = BlockHashes.from_chains([chain, chain])
    return Workload(
        np.array([0.0, gap_s]), np.array([prompt_len] * 2), np.array([output_len] * 2), blocks=blocks
    )


def test_a_collocated_hit_prefills_only_the_rest(latency: StepLatency) -> None:
    rec = simulate(latency, same_prompt_twice(1024, 4), AlwaysCollocated(), ONE_GPU)
    # The whole prompt but its last block is cached: 1,008 tokens, one pass over the last 16.
    assert rec.prefix_hit_tokens is not None and rec.prefix_hit_tokens.tolist() == [0, 1008]
    assert rec.cached_prompt_tokens is not None and rec.cached_prompt_tokens.tolist() == [0, 1008]
    assert rec.ttft_ms[1] == pytest.approx(latency.chunk_pass_ms(1008, 16), rel=1e-12)
    assert rec.ttft_ms[1] < rec.ttft_ms[0] / 5
    m = summarize(rec, 0.1, SloLimits())
    assert m.prefix_hit_token_share == pytest.approx(1008 / 2048)
    assert m.prefix_hit_request_share == pytest.approx(0.5)


def test_a_disaggregated_hit_shortens_the_prefill_and_the_transfer(
    profile: ProfileResult, latency: StepLatency
) -> None:
    rec = simulate(latency, same_prompt_twice(1024, 4), AlwaysDisaggregated(), ONE_PAIR)
    per_token_ms = profile.bytes_per_token / (profile.p2p_bandwidth_GBps * 1e6)
    # The prefill GPU holds the prompt (it computed it); the decode GPU too (its KV arrived),
    # so only the last 16 tokens are computed and sent.
    first_ms = latency.chunk_pass_ms(1008, 16) + 16 * per_token_ms + P.decode_formula_ms(1024, 1)
    assert rec.ttft_ms[1] == pytest.approx(first_ms, rel=1e-12)
    full_ms = profile.T_prefill[1024] + 1024 * per_token_ms + P.decode_formula_ms(1024, 1)
    assert rec.ttft_ms[0] == pytest.approx(full_ms, rel=1e-12)


def test_a_following_turn_finds_the_previous_output_on_its_decode_gpu(latency: StepLatency) -> None:
    tokens = np.arange(400)
    chain = chain_hashes(tokens, 16)
    # Turn 1: prompt 100, output 60 (10 full blocks); turn 2 repeats those 160 tokens.
    blocks = BlockHashes.from_chains([chain[:10], chain[:25]])
    wl = Workload(np.array([0.0, 10.0]), np.array([100, 300]), np.array([60, 100]), blocks=blocks)
    rec = simulate(latency, wl, AlwaysCollocated(), ONE_GPU)
    assert rec.prefix_hit_tokens is not None and rec.prefix_hit_tokens.tolist() == [0, 160]


def test_capacity_zero_and_no_capacity_reuse_nothing(latency: StepLatency) -> None:
    wl = same_prompt_twice(1024, 4)
    plain = simulate(latency, dataclasses.replace(wl, blocks=None), AlwaysDisaggregated(), ONE_PAIR)
    zero_fleet = dataclasses.replace(ONE_PAIR, prefix_cache_tokens=0)
    zero = simulate(latency, wl, AlwaysDisaggregated(), zero_fleet)
    off_fleet = dataclasses.replace(ONE_PAIR, prefix_cache_tokens=None)
    off = simulate(latency, wl, AlwaysDisaggregated(), off_fleet)
    assert zero.prefix_hit_tokens is not None and not zero.prefix_hit_tokens.any()
    assert off.prefix_hit_tokens is None and plain.prefix_hit_tokens is None
    for rec in (zero, off):
        assert np.array_equal(rec.first_token_ms, plain.first_token_ms)
        assert np.array_equal(rec.finish_ms, plain.finish_ms)


def test_the_profile_capacity_is_the_default(profile: ProfileResult) -> None:
    wl = same_prompt_twice(1024, 4)
    fleet = linear_fleet(num_prefill=0, num_decode=1)  # prefix_cache_tokens="profile"
    assert simulate(profile, wl, AlwaysCollocated(), fleet).prefix_hit_tokens is None
    sized = dataclasses.replace(profile, kv_capacity_tokens=CACHE)
    rec = simulate(sized, wl, AlwaysCollocated(), fleet)
    assert rec.prefix_hit_tokens is not None and rec.prefix_hit_tokens.tolist() == [0, 1008]


def test_the_rules_see_the_decode_gpus_hit(latency: StepLatency) -> None:
    # A 1,024-token prompt is long for T=512; its repeat, 16 tokens uncached, is not.
    rule = PromptAndQueueThreshold(512, 2)
    rec = simulate(latency, same_prompt_twice(1024, 4), rule, ONE_PAIR)
    assert rec.is_disaggregated.tolist() == [True, False]


def test_prefix_affinity_sends_a_session_back_to_its_cache(latency: StepLatency) -> None:
    shape = dataclasses.replace(SHAPE_DEFAULTS["chat"], sessions=60, system_share=0.0)
    wl = session_workload(shape, 2.0, 0)
    fleet = linear_fleet(num_prefill=1, num_decode=4, prefix_cache_tokens=CACHE)
    shares = []
    for choice in ("least-loaded", "prefix-affinity"):
        rec = simulate(latency, wl, AlwaysCollocated(), dataclasses.replace(fleet, decode_choice=choice))
        shares.append(summarize(rec, 1.0, SloLimits()).prefix_hit_token_share)
    assert shares[0] is not None and shares[1] is not None
    assert shares[1] > shares[0] + 0.1


def _digest(rec: SimRecords) -> str:
    h = hashlib.sha256()
    for times in (rec.first_token_ms, rec.finish_ms, rec.prefill_start_ms):
        h.update(np.ascontiguousarray(times).tobytes())
    h.update(np.ascontiguousarray(rec.is_disaggregated).tobytes())
    h.update(np.ascontiguousarray(rec.engine_index).tobytes())
    return h.hexdigest()[:16]


# Digests of runs made before the simulator had prefix caches (same workload, fleets, rules).
BEFORE = {
    ("conditional", "collocated"): "bc16d8b3578c1199",
    ("conditional", "disaggregated"): "7b0cf3497418df50",
    ("conditional", "threshold-queue"): "8c9b1a8093348c87",
    ("pools", "collocated"): "018bd8a9e4fe8183",
    ("pools", "disaggregated"): "8763824fb8923c5b",
    ("pools", "threshold-queue"): "9160b1ef7119ce66",
}


@pytest.mark.parametrize(("topology", "policy"), sorted(BEFORE))
def test_runs_without_reuse_are_as_before(profile: ProfileResult, topology: str, policy: str) -> None:
    wl = poisson_workload(400, 1.0, parse_length_spec("lognormal:1024,128"), seed=3).at_rate(6.0)
    if topology == "conditional":
        fleet = linear_fleet()
    else:
        fleet = linear_fleet(topology="pools", num_mixed=3, num_prefill=2, num_decode=3)
    assert _digest(simulate(profile, wl, make_policy(policy), fleet)) == BEFORE[(topology, policy)]
    # Block hashes without a cache capacity (the profile has none): the same run.
    chains = [chain_hashes(np.full(p, i), 16)[: p // 16] for i, p in enumerate(wl.prompt_len.tolist())]
    hashed = dataclasses.replace(wl, blocks=BlockHashes.from_chains(chains))
    assert _digest(simulate(profile, hashed, make_policy(policy), fleet)) == BEFORE[(topology, policy)]


class ViewsSeen:
    """Answers ``answer`` to every request and keeps the views it was shown."""

    name = "views"

    def __init__(self, answer: PolicyAnswer) -> None:
        self.answer = answer
        self.views: list[RouteView] = []

    def decide(self, view: RouteView) -> PolicyAnswer:
        self.views.append(view)
        return self.answer


@pytest.mark.parametrize("answer", [ANSWER_COLLOCATED, ANSWER_DISAGGREGATED], ids=["colloc", "disagg"])
def test_the_view_reports_the_hit_on_each_paths_gpu(latency: StepLatency, answer: PolicyAnswer) -> None:
    pools = linear_fleet(
        topology="pools", num_mixed=1, num_prefill=1, num_decode=1, prefix_cache_tokens=CACHE
    )
    seen = ViewsSeen(answer)
    simulate(latency, same_prompt_twice(1024, 4), seen, pools)
    first, second = seen.views
    assert (first.cached_prompt_tokens, first.colloc_cached_prompt_tokens) == (0, 0)
    # The GPU that served the first holds its prompt; the other GPU's hit is 0.
    hits = (
        second.cached_prompt_tokens,
        second.colloc_cached_prompt_tokens,
        second.prefill_cached_prompt_tokens,
    )
    assert hits == ((0, 1008, 0) if answer is ANSWER_COLLOCATED else (1008, 0, 1008))
    assert first.prefill_cached_prompt_tokens == 0
    # One GPU for both paths: its hit is cached_prompt_tokens, the collocation GPU's not reported.
    one = ViewsSeen(answer)
    simulate(latency, same_prompt_twice(1024, 4), one, ONE_PAIR)
    assert [(v.cached_prompt_tokens, v.colloc_cached_prompt_tokens) for v in one.views] == [
        (0, None),
        (1008, None),
    ]
    # The prefill GPU it would go to holds the prompt when the first was disaggregated.
    pool_hit = 1008 if answer is ANSWER_DISAGGREGATED else 0
    assert [v.prefill_cached_prompt_tokens for v in one.views] == [0, pool_hit]
    # A shared prefill queue: the GPU is not known at arrival, nothing is reported.
    shared = ViewsSeen(answer)
    simulate(
        latency, same_prompt_twice(1024, 4), shared, dataclasses.replace(ONE_PAIR, prefill_queue="shared")
    )
    assert [v.prefill_cached_prompt_tokens for v in shared.views] == [None, None]


def test_pools_hit_on_the_gpu_of_each_path(latency: StepLatency) -> None:
    pools = linear_fleet(
        topology="pools", num_mixed=1, num_prefill=1, num_decode=1, prefix_cache_tokens=CACHE
    )
    wl = same_prompt_twice(1024, 4)
    colloc = simulate(latency, wl, AlwaysCollocated(), pools)
    # The mixed GPU prefilled the first and holds it; the view reports the decode GPU's hit (none).
    assert colloc.prefix_hit_tokens is not None and colloc.prefix_hit_tokens.tolist() == [0, 1008]
    assert colloc.cached_prompt_tokens is not None and colloc.cached_prompt_tokens.tolist() == [0, 0]
    disagg = simulate(latency, wl, AlwaysDisaggregated(), pools)
    assert disagg.cached_prompt_tokens is not None and disagg.cached_prompt_tokens.tolist() == [0, 1008]
    assert disagg.engine_index.tolist() == [1, 1]  # the decode pool's GPU (mixed GPUs first)


@pytest.mark.parametrize("capacity", [3_000, 12_000, 100_000])
@pytest.mark.parametrize(
    "policy", [AlwaysCollocated(), PromptAndQueueThreshold(512, 2)], ids=["colloc", "tq"]
)
def test_hits_under_kv_capacity_hold_their_blocks_and_give_every_one_back(
    latency: StepLatency, capacity: int, policy: Policy
) -> None:
    # Multi-turn sessions on small KV pools: a hit takes its cached blocks when the prompt is
    # scheduled (or is given up when they are not free); under pressure requests are preempted.
    shape = dataclasses.replace(SHAPE_DEFAULTS["chat"], sessions=80, max_context=1500)
    wl = session_workload(shape, 4.0, 0)
    fleet = linear_fleet(
        num_prefill=1, num_decode=2, max_num_seqs=16, kv_capacity_tokens=capacity, prefix_cache_tokens=CACHE
    )
    state = ClusterSimulation(fleet, latency, policy).prepare(wl, wl.output_len)
    state.run()
    rec = state.records(policy.name)
    assert np.all(rec.finish_count == 1)
    assert np.array_equal(rec.tokens_generated, rec.output_len)
    assert rec.prefix_hit_tokens is not None and rec.prefix_hit_tokens.sum() > 0
    assert np.all(rec.prefix_hit_tokens < rec.prompt_len)
    for gpu in state.engines:
        kv = gpu.kv
        assert kv is not None
        assert kv.num_free == kv.num_blocks and not kv.admitted
        assert gpu.pending_prefill_tokens == 0
    if capacity == 3_000:
        assert rec.num_preemptions > 0
