"""Session workloads: determinism, the parameters' effects, the context chain, the spec."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from solver.errors import InvalidTrace
from solver.sim.sessions import SHAPE_DEFAULTS, parse_session_spec, session_workload

CHAT = SHAPE_DEFAULTS["chat"]


def test_same_seed_same_sessions_other_seed_other_ones() -> None:
    a, b, c = (session_workload(CHAT, 1.0, seed) for seed in (1, 1, 2))
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_len, b.prompt_len)
    assert a.blocks is not None and b.blocks is not None
    assert np.array_equal(a.blocks.hashes, b.blocks.hashes)
    assert not np.array_equal(a.prompt_len, c.prompt_len[: len(a.prompt_len)])


def test_a_rate_changes_the_session_starts_only() -> None:
    slow, fast = session_workload(CHAT, 0.5, 3), session_workload(CHAT, 4.0, 3)
    assert sorted(slow.prompt_len.tolist()) == sorted(fast.prompt_len.tolist())
    assert fast.duration_s < slow.duration_s
    assert fast.mean_rate is not None and slow.mean_rate is not None and fast.mean_rate > slow.mean_rate


def test_each_turn_repeats_the_previous_turn_and_its_output() -> None:
    shape = dataclasses.replace(CHAT, sessions=1, turns=5.0, think_s=1.0, system_share=0.0)
    wl = session_workload(shape, 1.0, 0)
    blocks = wl.blocks
    assert blocks is not None and wl.num_requests >= 2
    bs = blocks.block_size
    for k in range(1, wl.num_requests):
        before = wl.prompt_len[k - 1] + wl.output_len[k - 1]
        assert wl.prompt_len[k] > before  # the context plus new tokens
        shared = before // bs
        assert np.array_equal(blocks.chain(k)[:shared], blocks.chain(k - 1)[:shared])
        assert len(blocks.chain(k)) == (wl.prompt_len[k] + wl.output_len[k]) // bs
    assert np.all(np.diff(wl.arrival_s) >= shape.reply_s_per_token * wl.output_len[:-1])


def test_a_shared_system_prompt_is_shared_across_sessions() -> None:
    def first_blocks(share: float) -> set[int]:
        shape = dataclasses.replace(CHAT, sessions=20, system_share=share, system_len=160)
        wl = session_workload(shape, 1.0, 0)
        assert wl.blocks is not None
        return {int(wl.blocks.chain(i)[0]) for i in range(wl.num_requests)}

    assert len(first_blocks(1.0)) == 1  # every session opens with the one system prompt
    assert len(first_blocks(0.0)) == 20  # each its own


def test_turns_and_max_context_bound_the_sessions() -> None:
    few = session_workload(dataclasses.replace(CHAT, turns=2.0), 1.0, 0)
    many = session_workload(dataclasses.replace(CHAT, turns=10.0, max_context=100_000), 1.0, 0)
    assert many.num_requests > 3 * few.num_requests
    capped = session_workload(dataclasses.replace(CHAT, turns=10.0, max_context=1500), 1.0, 0)
    assert np.all(capped.prompt_len + capped.output_len <= 1500)
    assert capped.num_requests < many.num_requests


def test_spec_strings() -> None:
    shape = parse_session_spec("chat:turns=8,think_s=20,new=120,system_len=300,sessions=50")
    got = (shape.turns, shape.think_s, shape.new, shape.system_len, shape.sessions)
    assert got == (8.0, 20.0, 120.0, 300, 50)
    assert parse_session_spec("agent") == SHAPE_DEFAULTS["agent"]
    for bad, message in [
        ("talk", "chat or agent"),
        ("chat:turns", "KEY=VALUE"),
        ("chat:colour=3", "KEY=VALUE"),
        ("chat:sessions=1.5", "integer"),
        ("chat:system_share=2", "system_share"),
        ("chat:max_context=100,system_len=400", "max_context"),
    ]:
        with pytest.raises(InvalidTrace, match=message):
            parse_session_spec(bad)
