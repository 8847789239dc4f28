"""KV capacity in blocks: queueing for blocks, recompute preemption, conservation, and that an
unlimited capacity leaves every run as it was (fingerprints taken before KV capacity existed)."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import InvalidSimConfig
from solver.profile_result import ProfileResult
from solver.sim import (
    AlwaysCollocated,
    AlwaysDisaggregated,
    ClusterSimulation,
    FleetConfig,
    Policy,
    PromptThreshold,
    SimRecords,
    Workload,
    parse_length_spec,
    poisson_workload,
    simulate,
)
from solver.sim.events import check_run
from solver.sim.kv_pool import KvPool
from solver.sim.latency import StepLatency
from tests.solver.sim import profiles as P


def together(prompts: list[int], outputs: list[int], gap_ms: float = 0.0) -> Workload:
    arrivals = np.arange(len(prompts), dtype=np.float64) * gap_ms / 1000.0
    return Workload(arrivals, np.array(prompts), np.array(outputs))


def both(latency: StepLatency, fleet: FleetConfig, policy: Policy, wl: Workload) -> list[SimRecords]:
    """Per-step events and decode runs: the same run twice."""
    return [
        ClusterSimulation(fleet, latency, policy, use_runs=runs).run(wl, wl.output_len)
        for runs in (False, True)
    ]


def assert_same(a: SimRecords, b: SimRecords) -> None:
    for name in ("first_token_ms", "finish_ms", "tokens_generated", "engine_index"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert (a.num_preemptions, a.num_recomputed_tokens) == (b.num_preemptions, b.num_recomputed_tokens)


def assert_conserved(rec: SimRecords) -> None:
    """Every request finishes once with all its tokens, each counted once."""
    assert np.all(rec.finish_count == 1)
    assert np.array_equal(rec.tokens_generated, rec.output_len)
    assert rec.total_tokens_generated == int(rec.output_len.sum())
    assert np.all(rec.first_token_ms <= rec.finish_ms)


# --- the block arithmetic ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 15), min_size=1, max_size=12),
    st.integers(0, 100),
    st.integers(1, 70),
    st.integers(0, 60),
)
def test_run_need_and_run_fit_equal_a_step_by_step_count(
    residues: list[int], s0: int, steps: int, free: int
) -> None:
    pool = KvPool(16 * 1000, 16)
    for r in residues:
        pool.phase[r] += 1
    pool.num_free = free
    per_step = [pool.phase[(s0 + k) % 16] for k in range(1, steps + 1)]
    assert pool.run_need(s0, steps, len(residues)) == sum(per_step)
    fit = pool.run_fit(s0, steps, len(residues))
    assert sum(per_step[:fit]) <= free
    assert fit == steps or sum(per_step[: fit + 1]) > free


def test_a_decode_needs_a_block_when_its_context_crosses_a_boundary() -> None:
    pool = KvPool(1600, 16)
    # Joined after its prefill in step 3 with a 32-token prompt: context 32 + s - 3 in step s.
    pool.join(32 - 3)
    needs = [s for s in range(4, 40) if pool.step_need(s)]
    # Token 33 (step 4) opens block 3, token 49 (step 20) block 4, token 65 (step 36) block 5.
    assert needs == [4, 20, 36]


# --- queueing for blocks ------------------------------------------------------------------------


def test_capacity_makes_a_prompt_wait_for_blocks(latency: StepLatency) -> None:
    # 64 blocks of 16: A (600 + 100 tokens, 44 blocks at its end) leaves too few for B's first
    # chunk (511 tokens beside A's decode: 32 blocks), so B starts when A has finished.
    wl = together([600, 600], [100, 100])
    roomy = FleetConfig(num_prefill=0, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
    tight = dataclasses.replace(roomy, kv_capacity_tokens=1024)
    free = simulate(latency, wl, AlwaysCollocated(), roomy)
    assert free.first_token_ms[1] < free.finish_ms[0]  # unlimited: B runs beside A
    for rec in both(latency, tight, AlwaysCollocated(), wl):
        assert_conserved(rec)
        assert rec.num_preemptions == 0 and rec.kv_capacity_tokens == 1024
        # A's last 88 prompt tokens run alone: B's 424-token chunk (27 blocks) did not fit beside.
        assert rec.first_token_ms[0] < free.first_token_ms[0]
        assert rec.first_token_ms[1] > rec.finish_ms[0]


def test_a_transferred_request_waits_for_blocks_for_its_whole_kv(latency: StepLatency) -> None:
    # Capacity 1,024 tokens: A's 900-token KV takes 57 blocks, B's 900 would need 57 more.
    wl = together([900, 900], [40, 40], gap_ms=1.0)
    roomy = FleetConfig(num_prefill=2, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
    tight = dataclasses.replace(roomy, kv_capacity_tokens=1024)
    free = simulate(latency, wl, AlwaysDisaggregated(), roomy)
    assert free.first_token_ms[1] < free.finish_ms[0]
    for rec in both(latency, tight, AlwaysDisaggregated(), wl):
        assert_conserved(rec)
        assert rec.num_preemptions == 0
        assert rec.first_token_ms[1] > rec.finish_ms[0]  # admitted once A's blocks are free


# --- preemption ---------------------------------------------------------------------------------


def test_a_full_cache_preempts_the_request_admitted_last_and_recomputes_it(latency: StepLatency) -> None:
    # 64 blocks. A (500 tokens) prefills in step 1, B (500) finishes its prefill in step 2; with
    # 512-token contexts each they hold 32 blocks apiece. In step 14 A's context reaches 513
    # tokens and needs block 33: none is free, so B (admitted last) is preempted with 511 KV
    # tokens and 12 generated; it re-prefills 512 tokens once A is done.
    wl = together([500, 500], [300, 300])
    roomy = FleetConfig(num_prefill=0, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
    tight = dataclasses.replace(roomy, kv_capacity_tokens=1024)
    free = simulate(latency, wl, AlwaysCollocated(), roomy)
    runs = both(latency, tight, AlwaysCollocated(), wl)
    assert_same(*runs)
    rec = runs[1]
    assert_conserved(rec)
    assert rec.num_preemptions == 1
    assert rec.num_recomputed_tokens == 511
    # Both first tokens are those of the unlimited run: B's comes before its preemption.
    assert np.array_equal(rec.first_token_ms, free.first_token_ms)
    assert rec.finish_ms[0] == pytest.approx(free.finish_ms[0], rel=0.02)  # A barely slowed
    assert rec.finish_ms[1] > rec.finish_ms[0] + 200 * 6.0  # B's rest decodes after A (>= 6 ms a step)


@pytest.mark.parametrize("capacity", [2100, 4000, 9000])
@pytest.mark.parametrize(
    ("policy", "fleet"),
    [
        (
            AlwaysCollocated(),
            FleetConfig(num_prefill=0, num_decode=2, max_num_seqs=16, max_num_batched_tokens=256),
        ),
        (
            PromptThreshold(900),
            FleetConfig(num_prefill=1, num_decode=2, max_num_seqs=16, max_num_batched_tokens=512),
        ),
        (
            AlwaysDisaggregated(),
            FleetConfig(num_prefill=2, num_decode=2, max_num_seqs=16, max_num_batched_tokens=512),
        ),
    ],
    ids=["collocated", "threshold", "disaggregated"],
)
def test_conservation_under_preemption_and_runs_match_single_steps(
    latency: StepLatency, policy: Policy, fleet: FleetConfig, capacity: int
) -> None:
    wl = poisson_workload(500, 14.0, parse_length_spec("uniform:64-2000,2-40"), seed=7)
    fleet = dataclasses.replace(fleet, kv_capacity_tokens=capacity)
    check_run(latency, wl.prompt_len.tolist(), wl.output_len.tolist(), fleet)  # inside the ranges
    # Allowed, so that every lookup is compared with the ranges: none goes beyond (re-prefills
    # included), and the run is the same as one not allowed.
    runs = both(latency, dataclasses.replace(fleet, allow_extrapolation=True), policy, wl)
    assert_same(*runs)
    assert_same(runs[1], simulate(latency, wl, policy, fleet))
    for rec in runs:
        assert_conserved(rec)
        assert sum(rec.extrapolated.values()) == 0 and rec.num_extrapolated_steps == 0
    if capacity == 2100:
        assert runs[1].num_preemptions > 0 and runs[1].num_recomputed_tokens > 0


def test_the_profile_capacity_is_the_default_and_none_turns_it_off(profile: ProfileResult) -> None:
    wl = together([500, 500], [300, 300])
    small = StepLatency(dataclasses.replace(profile, kv_capacity_tokens=1024))
    fleet = FleetConfig(num_prefill=0, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
    assert simulate(small, wl, AlwaysCollocated(), fleet).num_preemptions == 1
    off = simulate(small, wl, AlwaysCollocated(), dataclasses.replace(fleet, kv_capacity_tokens=None))
    assert off.num_preemptions == 0 and off.kv_capacity_tokens is None


def test_a_context_no_gpu_can_hold_is_refused(latency: StepLatency) -> None:
    fleet = FleetConfig(num_prefill=0, num_decode=1, max_num_seqs=16, kv_capacity_tokens=1000)
    with pytest.raises(InvalidSimConfig, match="context of 1,049 tokens does not fit the 992 tokens"):
        simulate(latency, together([1000], [50]), AlwaysCollocated(), fleet)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kv_capacity_tokens": 0}, "kv_capacity_tokens: expected an integer >= 1"),
        ({"kv_capacity_tokens": "lots"}, "kv_capacity_tokens: expected an integer >= 1, 'profile' or None"),
        ({"kv_capacity_tokens": 8}, "holds no block of 16 tokens"),
        ({"block_size": 0}, "block_size: expected an integer >= 1"),
    ],
)
def test_bad_kv_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSimConfig, match=message):
        FleetConfig(**kwargs)  # type: ignore[arg-type]  # bad values on purpose


# --- unlimited capacity is the simulator as it was ------------------------------------------------

# sha256 (first 16 hex digits) of first_token_ms, finish_ms, tokens_generated and engine_index,
# with the engine steps and tokens, computed on this scenario before KV capacity was added
# ("threshold": recomputed when transfers began to wait behind the prompts queued before them on
# their decode GPU, vLLM's one waiting line; the other two have no transfer beside local prompts).
BEFORE = {
    "collocated": ("92c651cb44bb63f6", 11080, 16683),
    "threshold": ("aa615c1703a6072c", 12225, 16683),
    "disaggregated": ("b26683869ace348e", 12415, 16683),
}


def fingerprint(rec: SimRecords) -> tuple[str, int, int]:
    h = hashlib.sha256()
    for a in (rec.first_token_ms, rec.finish_ms, rec.tokens_generated, rec.engine_index):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16], rec.num_engine_steps, rec.total_tokens_generated


@pytest.mark.parametrize("capacity", ["profile", None, 10_000_000])
@pytest.mark.parametrize(
    ("name", "policy", "fleet"),
    [
        (
            "collocated",
            AlwaysCollocated(),
            FleetConfig(num_prefill=0, num_decode=2, max_num_seqs=16, max_num_batched_tokens=256),
        ),
        (
            "threshold",
            PromptThreshold(900),
            FleetConfig(num_prefill=1, num_decode=2, max_num_seqs=16, max_num_batched_tokens=512),
        ),
        (
            "disaggregated",
            AlwaysDisaggregated(),
            FleetConfig(num_prefill=2, num_decode=2, max_num_seqs=16, max_num_batched_tokens=512),
        ),
    ],
)
def test_unlimited_capacity_is_bit_identical_to_the_simulator_before_it(
    latency: StepLatency, name: str, policy: Policy, fleet: FleetConfig, capacity: int | str | None
) -> None:
    # The synthetic profile has no kv_capacity_tokens: "profile" means unlimited. A capacity no
    # request comes near blocks nothing and preempts nothing: the same bits too.
    wl = poisson_workload(800, 14.0, parse_length_spec("uniform:64-2000,2-40"), seed=7)
    rec = simulate(latency, wl, policy, dataclasses.replace(fleet, kv_capacity_tokens=capacity))
    assert fingerprint(rec) == BEFORE[name]
    assert rec.num_preemptions == 0


# --- against a reference: every request's own state, stepped one by one -----------------------


def reference_run(
    latency: StepLatency,
    prompts: list[int],
    outputs: list[int],
    budget: int,
    capacity: int,
    size: int,
    trace: list[tuple[int, list[tuple[int, int, int]], float, int]] | None = None,
) -> tuple[list[float], list[float], int, int]:
    """One GPU, every request arriving at 0 (the first alone in the first step, as the event
    loop starts an idle GPU at once), scheduled by the rules of ``solver.sim.kv_pool`` with
    explicit per-request tokens: no residue counters, heaps, offsets or runs. Returns first
    token and finish times, preemptions and recomputed tokens."""

    def blocks(tokens: int) -> int:
        return -(-tokens // size)

    n = len(prompts)
    cached = [0] * n  # tokens whose KV is held
    made = [0] * n  # tokens generated
    prefilling = [True] * n  # its prefill (or re-prefill after a preemption) not yet done
    first = [float("nan")] * n
    finish = [float("nan")] * n
    running: list[int] = []  # admission order: decoding, or the one prefill under way
    waiting: list[int] = [0]
    free = capacity // size
    preemptions = recomputed = 0
    t = 0.0
    arrived = False
    while running or waiting:
        decoding = [r for r in running if not prefilling[r]]
        preempted = False
        while True:
            decodes = [r for r in running if r in decoding]
            heads = [r for r in running if r not in decoding]
            room = budget - len(decodes)
            take_head = (
                min(prompts[heads[0]] + made[heads[0]] - cached[heads[0]], room) if heads and room > 0 else 0
            )
            need = sum(blocks(cached[r] + 1) - blocks(cached[r]) for r in decodes)
            if heads:
                need += blocks(cached[heads[0]] + take_head) - blocks(cached[heads[0]])
            if need <= free:
                break
            victim = running.pop()
            free += blocks(cached[victim])
            recomputed += cached[victim]
            cached[victim] = 0
            prefilling[victim] = True
            waiting.insert(0, victim)
            preemptions += 1
            preempted = True
        free -= need
        contexts = [cached[r] + 1 for r in decodes]
        chunks: list[tuple[int, int, int]] = []  # (request, done before, tokens)
        if heads and take_head:
            chunks.append((heads[0], cached[heads[0]], take_head))
        left = room - take_head
        if not preempted or not running:
            while waiting and left > 0:
                r = waiting[0]
                take = min(prompts[r] + made[r], left)
                if blocks(take) > free:
                    break
                waiting.pop(0)
                running.append(r)
                free -= blocks(take)
                chunks.append((r, 0, take))
                left -= take
        chunk = sum(c for _, _, c in chunks)
        prefix = sum(latency.prefix_attention_ms(done, c) for _, done, c in chunks if done)
        if decodes:
            dur = latency.decode_ms(sum(contexts) / len(contexts), len(contexts))
            if chunk:
                dur += latency.interference_ms(chunk, len(contexts)) + prefix
        else:
            dur = latency.prefill_ms(chunk) + prefix
        t += dur
        if trace is not None:
            trace.append((len(decodes), chunks, dur, free))
        for r in decodes:
            cached[r] += 1
            made[r] += 1
        for r, _, c in chunks:
            cached[r] += c
            if cached[r] == prompts[r] + made[r]:  # its prefill (or re-prefill) ends: a token
                prefilling[r] = False
                made[r] += 1
                if first[r] != first[r]:
                    first[r] = t
        for r in list(running):
            if made[r] == outputs[r]:
                finish[r] = t
                free += blocks(cached[r])
                running.remove(r)
        if not arrived:
            waiting.extend(range(1, n))
            arrived = True
    return first, finish, preemptions, recomputed


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(16, 700), st.integers(2, 60)), min_size=2, max_size=10),
    st.integers(0, 4),
)
def test_the_kv_scheduler_equals_a_reference_stepped_request_by_request(
    shapes: list[tuple[int, int]], slack_blocks: int
) -> None:
    latency = StepLatency(P.make_profile())
    prompts, outputs = [p for p, _ in shapes], [o for _, o in shapes]
    longest = max(p + o - 1 for p, o in shapes)
    capacity = (-(-longest // 16) + slack_blocks * 8) * 16  # from just enough to a little more
    wl = together(prompts, outputs)
    fleet = FleetConfig(
        num_prefill=0, num_decode=1, max_num_seqs=16, max_num_batched_tokens=256, kv_capacity_tokens=capacity
    )
    first, finish, preemptions, recomputed = reference_run(latency, prompts, outputs, 256, capacity, 16)
    for rec in both(latency, fleet, AlwaysCollocated(), wl):
        assert_conserved(rec)
        assert (rec.num_preemptions, rec.num_recomputed_tokens) == (preemptions, recomputed)
        assert rec.first_token_ms.tolist() == pytest.approx(first, rel=1e-9)
        assert rec.finish_ms.tolist() == pytest.approx(finish, rel=1e-9)


@pytest.mark.parametrize("first_token", ["decode-engine", "prefill-engine"])
@pytest.mark.parametrize("capacity", [1500, 2100, 4000])
@pytest.mark.parametrize(
    "policy", [AlwaysDisaggregated(), PromptThreshold(700)], ids=["disaggregated", "threshold"]
)
def test_every_block_comes_back_when_the_run_ends(
    latency: StepLatency, policy: Policy, capacity: int, first_token: str
) -> None:
    # Uniform prompt lengths include 16k + 1 tokens, whose first-step block is taken on admission.
    wl = poisson_workload(400, 20.0, parse_length_spec("uniform:64-1400,2-60"), seed=3)
    fleet = FleetConfig(
        num_prefill=2,
        num_decode=2,
        max_num_seqs=16,
        max_num_batched_tokens=256,
        kv_capacity_tokens=capacity,
        first_token=first_token,
    )
    preempted = 0
    for use_runs in (False, True):
        state = ClusterSimulation(fleet, latency, policy, use_runs=use_runs).prepare(wl, wl.output_len)
        state.run()
        rec = state.records(policy.name)
        assert_conserved(rec)
        preempted += rec.num_preemptions
        for gpu in state.engines:
            kv = gpu.kv
            assert kv is not None
            assert kv.num_free == kv.num_blocks and kv.credit == 0
            assert not any(kv.phase) and not kv.admitted and not gpu.resumed
    if capacity == 1500:
        assert preempted > 0
