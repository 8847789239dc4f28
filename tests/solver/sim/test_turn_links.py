"""Closed-loop turns: a follow-up arrives think time after its previous turn finishes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pdroute_core.routing.types import COLLOCATED
from solver.errors import InvalidTrace
from solver.sim import AlwaysCollocated, PolicyAnswer, RouteView, Workload, simulate
from solver.sim.latency import StepLatency
from solver.sim.sessions import SHAPE_DEFAULTS, session_workload
from solver.sim.turn_links import TurnLinks
from tests.solver.sim.profiles import linear_fleet

PAIR = linear_fleet(num_prefill=1, num_decode=1)


def three_turns(think_s: float) -> Workload:
    links = TurnLinks(np.array([1, 2]), np.array([0, 1]), np.array([think_s, think_s]))
    # arrival_s of the follow-ups is an estimate the closed loop does not use.
    return Workload(
        np.array([0.0, 0.001, 0.002]), np.array([300, 500, 700]), np.array([40, 40, 40]), links=links
    )


def test_a_follow_up_arrives_think_time_after_the_previous_finish(latency: StepLatency) -> None:
    rec = simulate(latency, three_turns(0.5), AlwaysCollocated(), PAIR)
    assert rec.arrival_ms[0] == 0.0
    assert rec.arrival_ms[1] == pytest.approx(rec.finish_ms[0] + 500.0)
    assert rec.arrival_ms[2] == pytest.approx(rec.finish_ms[1] + 500.0)
    assert np.all(rec.finish_count == 1)
    # Each turn ran alone: its latency is that of the request on an idle GPU.
    alone = simulate(
        latency, dataclasses.replace(three_turns(0.5), links=None).head(1), AlwaysCollocated(), PAIR
    )
    assert rec.e2e_ms[0] == alone.e2e_ms[0]


class ShedsTheFirst:
    name = "sheds-first"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return PolicyAnswer(COLLOCATED, is_infeasible=view.prompt_len == 300)


def test_a_shed_turn_releases_its_follow_up_from_its_arrival(latency: StepLatency) -> None:
    rec = simulate(latency, three_turns(2.0), ShedsTheFirst(), PAIR, shed=True)
    assert rec.is_shed.tolist() == [True, False, False]
    assert rec.arrival_ms[1] == pytest.approx(2000.0)
    assert rec.arrival_ms[2] == pytest.approx(rec.finish_ms[1] + 2000.0)


def test_closed_loop_sessions_carry_links_and_open_ones_none() -> None:
    closed = session_workload(SHAPE_DEFAULTS["chat"], 1.0, 0)
    opened = session_workload(dataclasses.replace(SHAPE_DEFAULTS["chat"], loop="open"), 1.0, 0)
    assert closed.links is not None and opened.links is None
    # Every turn but each session's first waits for one earlier request.
    assert len(closed.links.follow_up) == closed.num_requests - SHAPE_DEFAULTS["chat"].sessions
    assert np.all(closed.links.previous < closed.links.follow_up)
    head = closed.head(10).links
    assert head is not None and np.all(head.follow_up < 10)


def test_a_slower_fleet_spreads_closed_loop_turns_out(latency: StepLatency) -> None:
    wl = session_workload(dataclasses.replace(SHAPE_DEFAULTS["chat"], sessions=30, think_s=0.5), 1.0, 0)
    fast = simulate(latency, wl, AlwaysCollocated(), linear_fleet(num_prefill=1, num_decode=4))
    slow = simulate(latency, wl, AlwaysCollocated(), linear_fleet(num_prefill=1, num_decode=1))
    assert slow.makespan_ms > fast.makespan_ms
    assert wl.links is not None
    follow = wl.links.follow_up
    assert np.all(slow.arrival_ms[follow] >= slow.finish_ms[wl.links.previous])


@pytest.mark.parametrize(
    ("follow_up", "previous", "think_s", "message"),
    [
        ([1], [1], [0.0], "after the request"),
        ([1, 1], [0, 0], [0.0, 0.0], "at most one"),
        ([1], [0], [-1.0], "think times"),
        ([1], [0, 0], [0.0], "differ in length"),
    ],
)
def test_invalid_links(follow_up: list[int], previous: list[int], think_s: list[float], message: str) -> None:
    with pytest.raises(InvalidTrace, match=message):
        TurnLinks(np.array(follow_up), np.array(previous), np.array(think_s))
