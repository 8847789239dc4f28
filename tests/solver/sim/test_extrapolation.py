"""The up-front range check: refusals name the table, its range and the value; allowed runs
count every step beyond a table, per table, and say so in the records and the summary."""

from __future__ import annotations

import dataclasses

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
    SloLimits,
    Workload,
    simulate,
    summarize,
)
from solver.sim.extrapolation import decode_steps_beyond
from solver.sim.latency import StepLatency
from solver.sim.report import format_extrapolation
from tests.solver.sim import profiles as P

ONE_GPU = FleetConfig(num_prefill=0, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
ONE_PAIR = FleetConfig(num_prefill=1, num_decode=1, max_num_seqs=16, max_num_batched_tokens=512)
FLAG = "; run with --allow-extrapolation (allow_extrapolation=True) to extend the tables linearly"


def requests(prompts: list[int], outputs: list[int]) -> Workload:
    return Workload(np.arange(len(prompts), dtype=np.float64), np.array(prompts), np.array(outputs))


@pytest.mark.parametrize(
    ("fleet", "wl", "message"),
    [
        (
            ONE_PAIR,
            requests([14_050], [1]),
            "prompts up to 14,050 tokens, but the profile's T_prefill covers 64-2,048 tokens" + FLAG,
        ),
        (
            ONE_GPU,
            requests([1500], [700]),
            "decode contexts (prompt + output - 1) up to 2,199 tokens, but the profile's T_decode covers "
            "kv_len 128-2,048 tokens" + FLAG,
        ),
        (
            dataclasses.replace(ONE_GPU, max_num_seqs=64),
            requests([100] * 40, [5] * 40),
            "decode batches up to 40 (max_num_seqs 64), but the profile's T_decode covers batches "
            "1-32 sequences (and 1 more beyond the profile)" + FLAG,
        ),
        (
            dataclasses.replace(ONE_GPU, max_num_batched_tokens=1024),
            requests([600, 600], [5, 5]),
            "prefill chunks beside decodes up to 1,023 tokens (max_num_batched_tokens 1,024), but the "
            "profile's T_interference covers chunks 64-512 tokens" + FLAG,
        ),
        (
            dataclasses.replace(ONE_GPU, max_num_seqs=20, max_num_batched_tokens=512),
            requests([100] * 20, [5] * 20),
            "decode batches beside a prefill chunk up to 19 (max_num_seqs 20), but the profile's "
            "T_interference covers decode batches 1-16 sequences" + FLAG,
        ),
        (
            dataclasses.replace(ONE_GPU, max_num_batched_tokens=4096),
            requests([2000, 2000], [1, 1]),
            "prefill-only steps up to 4,000 tokens (max_num_batched_tokens 4,096), but the profile's "
            "T_prefill covers 64-2,048 tokens" + FLAG,
        ),
    ],
    ids=["prompt", "context", "batch", "chunk", "interference-batch", "prefill-only"],
)
def test_a_run_beyond_a_table_is_refused_with_its_range_and_value(
    latency: StepLatency, fleet: FleetConfig, wl: Workload, message: str
) -> None:
    with pytest.raises(InvalidSimConfig) as exc:
        simulate(latency, wl, AlwaysCollocated() if fleet.num_prefill == 0 else AlwaysDisaggregated(), fleet)
    assert str(exc.value) == message
    assert "\n" not in str(exc.value)


def test_below_the_grid_is_clamping_not_extrapolation(latency: StepLatency) -> None:
    # 10-token prompts and contexts under the smallest kv_len: clamped lookups, never refused,
    # and not counted when counting is on (allowed runs count; refused ones have nothing to).
    wl = requests([10, 20], [30, 3])
    assert simulate(latency, wl, AlwaysCollocated(), ONE_GPU).allow_extrapolation is False
    rec = simulate(latency, wl, AlwaysCollocated(), ONE_GPU, allow_extrapolation=True)
    assert rec.extrapolated == {"T_prefill": 0, "T_decode": 0, "T_interference": 0, "T_chunk_prefix": 0}
    assert rec.num_extrapolated_steps == 0


def test_an_allowed_run_counts_the_steps_beyond_each_table(latency: StepLatency) -> None:
    # One 3,000-token prompt with 200 output tokens on one GPU: the prefill-only steps stay in
    # the grid (512-token chunks; the synthetic T_prefill covers 2,048), but the continued
    # chunks reach positions past 2,048 (the prefix rule reads T_prefill there: 2 chunks), and
    # the decode contexts pass 2,048 from the first decode step (all 199 steps).
    wl = requests([3000], [200])
    with pytest.raises(InvalidSimConfig, match="prompts up to 3,000 tokens"):
        simulate(latency, wl, AlwaysCollocated(), ONE_GPU)
    counts = []
    for use_runs in (False, True):
        fleet = dataclasses.replace(ONE_GPU, allow_extrapolation=True)
        rec = ClusterSimulation(fleet, latency, AlwaysCollocated(), use_runs=use_runs).run(wl, wl.output_len)
        counts.append((dict(rec.extrapolated), rec.num_extrapolated_steps))
        assert rec.allow_extrapolation is True
    assert counts[0] == counts[1]  # runs count the same steps as single steps
    extrapolated, steps = counts[0]
    assert extrapolated == {"T_prefill": 2, "T_decode": 199, "T_interference": 0, "T_chunk_prefix": 0}
    assert steps == 2 + 199
    m = summarize(rec, 1.0, SloLimits())
    assert m.allow_extrapolation and m.extrapolated == extrapolated and m.num_extrapolated_passes == steps
    line = format_extrapolation([m])
    assert line.startswith(
        "extrapolated passes (allowed; tables extended linearly beyond their measured ranges)"
    )
    assert "T_prefill 2, T_decode 199" in line


def test_simulate_argument_overrides_the_fleet(latency: StepLatency) -> None:
    wl = requests([3000], [2])
    rec = simulate(latency, wl, AlwaysDisaggregated(), ONE_PAIR, allow_extrapolation=True)
    assert rec.allow_extrapolation and rec.extrapolated["T_prefill"] == 1  # the prefill-pool pass
    with pytest.raises(InvalidSimConfig):
        simulate(
            latency,
            wl,
            AlwaysDisaggregated(),
            dataclasses.replace(ONE_PAIR, allow_extrapolation=True),
            allow_extrapolation=False,
        )


def test_chunk_prefix_range_is_checked_when_the_table_exists(profile: ProfileResult) -> None:
    table = {(p, c): P.prefill_formula_ms(c) + 0.002 * p for p in (512, 1024) for c in (256, 512)}
    lat = StepLatency(dataclasses.replace(profile, T_chunk_prefix=table))
    with pytest.raises(
        InvalidSimConfig,
        match="chunk prefixes up to 1,999 tokens, but the profile's "
        "T_chunk_prefix covers prefix_len 0-1,024 tokens",
    ):
        simulate(lat, requests([2000], [2]), AlwaysCollocated(), ONE_GPU)
    rec = simulate(lat, requests([1000], [2]), AlwaysCollocated(), ONE_GPU)  # prefixes < 1,000
    assert rec.extrapolated["T_chunk_prefix"] == 0


def test_with_kv_capacity_a_re_prefill_of_prompt_and_output_is_checked(profile: ProfileResult) -> None:
    # T_prefill measured to 1,024 tokens only: a 1,000-token prompt fits it, but once preempted
    # it may re-prefill up to 1,099 tokens (its context less one), which only KV capacity causes.
    short = {k: v for k, v in profile.T_prefill.items() if k <= 1024}
    lat = StepLatency(dataclasses.replace(profile, T_prefill=short))
    wl = requests([1000], [100])
    assert simulate(lat, wl, AlwaysCollocated(), ONE_GPU).num_preemptions == 0  # unlimited: fine
    with pytest.raises(InvalidSimConfig) as exc:
        simulate(lat, wl, AlwaysCollocated(), dataclasses.replace(ONE_GPU, kv_capacity_tokens=4096))
    assert str(exc.value) == (
        "re-prefills after a preemption (context less one) up to 1,099 tokens, but the profile's "
        "T_prefill covers 64-1,024 tokens" + FLAG
    )


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 3000),
    st.integers(0, 400),
    st.floats(-500.0, 2500.0, allow_nan=False),
    st.integers(1, 40),
)
def test_a_decode_runs_steps_beyond_equal_the_single_steps_count(
    first: int, length: int, offset: float, batch: int
) -> None:
    latency = StepLatency(P.make_profile())
    last = first + length - 1
    by_hand = sum(latency.is_decode_extrapolated(offset + s, batch) for s in range(first, last + 1))
    assert decode_steps_beyond(latency, first, last, offset, batch) == by_hand
