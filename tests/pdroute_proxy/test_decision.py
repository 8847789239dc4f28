"""The proxy's decision inputs and where each comes from, and the static rules' reasons (pure)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.engines.autofill import FleetSnapshot, Reading
from app.engines.config import fleet_from
from app.engines.sample import EngineSample
from app.params_store import ParamsStore
from pdroute_core.routing import QueueAwareModel
from pdroute_proxy.decision import Decider
from pdroute_proxy.ledger import RATE_WINDOW_S, Ledger
from pdroute_proxy.settings import ProxySettings
from tests.pdroute_proxy.conftest import start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine

FLEET = fleet_from(
    {
        "pools": {
            "prefill": [{"id": "p0", "url": "http://p0:8000/metrics", "kind": "vllm"}],
            "decode": [{"id": "d0", "url": "http://d0:8000/metrics", "kind": "vllm"}],
        }
    }
)


@dataclass
class Source:
    snapshot: FleetSnapshot


def decider(
    tmp_path: Path, params: Path, *, readings: dict[str, Reading], now: float = 10.0, **kw: Any
) -> Decider:
    settings = ProxySettings(engines_file=tmp_path / "unused.json", params_path=params, **kw)
    store = ParamsStore(params, lambda: 0.0, model_name=settings.decision_model)
    ledger = Ledger(1.0, window_s=settings.arrival_window_s or RATE_WINDOW_S)  # as the app builds it
    return Decider(settings, store, ledger, Source(FleetSnapshot(FLEET, readings)), lambda: now)


def test_inputs_come_from_the_scrape_and_the_proxys_own_accounting(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    fresh = Reading(EngineSample(running=5, waiting=9, kv_used_tokens=4000), taken_at=9.5)
    d = decider(tmp_path, queue_aware_params_file, readings={"d0": fresh, "p0": fresh})
    ticket = d.ledger.decode_ticket("d0", 300)  # sent, not yet prefilled
    running = d.ledger.prefill_ticket("p0", 700)
    queued = d.ledger.prefill_ticket("p0", 900)
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))
    assert (inputs.system_load, inputs.decode_batch_size, inputs.decode_context_tokens) == (5, 5, 4000)
    assert sources["system_load"] == sources["decode_context_tokens"] == "scrape:d0"
    assert (inputs.pending_prefill_tokens, inputs.decode_pending_prefill_tokens) == (300, 300)
    # The pool's queue is the proxy's (the scrape's 9 waiting are not used): oldest runs, the rest wait.
    assert (inputs.prefill_running_requests, inputs.prefill_running_tokens) == (1, 700)
    assert (inputs.prefill_queue_requests, inputs.prefill_queue_tokens, inputs.prefill_pool_gpus) == (
        1,
        900,
        1,
    )
    assert {
        sources[k] for k in ("prefill_queue_requests", "prefill_queue_tokens", "pending_prefill_tokens")
    } == {"proxy"}
    ticket.first_token(9.9)
    assert d.inputs(10, 5, "d0", ("p0",))[0].pending_prefill_tokens == 0
    for t in (ticket, running, queued):
        t.close()
    assert d.inputs(10, 5, "d0", ("p0",))[0].prefill_queue_tokens == 0
    choice = d.decide(1000, 50, "d0", ("p0",))
    assert choice.decided_by == "queue-aware" and choice.predicted_ttft_ms is not None


def test_the_pending_prompts_and_their_mean_prefix_count_each_prompt_whole_until_its_first_token(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    d = decider(tmp_path, queue_aware_params_file, readings={})
    assert d.inputs(10, 5, "d0", ())[0].pending_prefill_prefix_tokens == 0.0
    short, long = d.ledger.decode_ticket("d0", 1000), d.ledger.decode_ticket("d0", 3000)
    inputs, sources = d.inputs(10, 5, "d0", ())
    # 1,000 tokens at 500 on average and 3,000 at 1,500: (1,000^2 + 3,000^2) / (2 * 4,000).
    assert (inputs.pending_prefill_prefix_tokens, inputs.pending_prefill_requests) == (1250.0, 2)
    assert sources["pending_prefill_prefix_tokens"] == sources["pending_prefill_requests"] == "proxy"
    long.first_token(9.9)
    inputs = d.inputs(10, 5, "d0", ())[0]
    assert (inputs.pending_prefill_prefix_tokens, inputs.pending_prefill_requests) == (500.0, 1)
    short.close()  # cancelled before its first token
    inputs = d.inputs(10, 5, "d0", ())[0]
    assert (inputs.pending_prefill_prefix_tokens, inputs.pending_prefill_requests) == (0.0, 0)
    long.close()
    load = d.ledger.load("d0")
    assert (load.pending_prefill_sq, load.pending_prefill_requests) == (0, 0)


def test_without_a_fresh_scrape_the_decodes_are_the_proxys_count(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    stale = Reading(EngineSample(running=5), taken_at=0.0)  # 10 s old, stale after 2 s
    d = decider(tmp_path, queue_aware_params_file, readings={"d0": stale})
    for _ in range(3):
        d.ledger.decode_ticket("d0", 10).first_token(9.9)
    inputs, sources = d.inputs(100, 10, "d0", ("p0",))
    assert (inputs.system_load, sources["system_load"]) == (3, "proxy")
    assert sources["decode_context_tokens"] == "assumed"


def test_the_prefill_rate_is_what_the_proxy_prefilled_over_its_window_not_the_engines_counter(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    # The engine's counter says 5,000 prompt tokens/s (it counts KV-loaded prompts too); the
    # proxy prefilled 7,000 tokens there since its first request 10 s ago, 3,000 of them in the
    # last 2 s, and a 1-token step after a hand-off.
    counted = Reading(
        EngineSample(running=2, prompt_tokens_total=10_000.0), taken_at=9.5, prefill_tokens_per_s=5000.0
    )
    for window, rate in ((30.0, 7001 / 10.0), (0.0, 3001 / 2.0)):  # 0: over two seconds, as before
        d = decider(
            tmp_path, queue_aware_params_file, readings={"d0": counted}, now=10.0, arrival_window_s=window
        )
        d.ledger.count_arrival("d0", 0.0)  # the proxy's first request
        d.ledger.decode_ticket("d0", 4000).first_token(7.0)
        d.ledger.decode_ticket("d0", 1000).first_token(8.5)
        d.ledger.decode_ticket("d0", 2000).first_token(9.9)
        d.ledger.decode_ticket("d0", 1).first_token(9.95)  # prompt + first token, its KV loaded
        d.ledger.decode_ticket("d0", 700)  # sent, not yet prefilled: pending, not in the rate
        inputs, sources = d.inputs(100, 10, "d0", ("p0",))
        assert inputs.colloc_prefill_tokens_per_s == inputs.decode_prefill_tokens_per_s == pytest.approx(rate)
        assert sources["colloc_prefill_tokens_per_s"] == sources["decode_prefill_tokens_per_s"] == "proxy"
        assert inputs.pending_prefill_tokens == 700
        # Over the window's last 30 s once the proxy has run that long: the 7.0 s prompt drops out.
        assert d.ledger.prefill_rate("d0", 37.5) == pytest.approx(3001 / 30.0 if window else 0.0)
        assert d.ledger.prefill_rate("d0", 40.0) == 0.0  # everything has left the window


@pytest.mark.parametrize(
    ("policy", "prompt_len", "queued", "path", "reason"),
    [
        ("collocated", 5000, 0, "collocated", "always_collocated"),
        ("disaggregated", 10, 0, "disaggregated", "always_disaggregated"),
        ("threshold", 1001, 0, "disaggregated", "prompt_over_threshold"),
        ("threshold", 1000, 0, "collocated", "prompt_within_threshold"),
        ("threshold-queue", 1001, 1, "disaggregated", "prompt_over_threshold"),
        ("threshold-queue", 1001, 2, "collocated", "prefill_queue_full"),
    ],
)
def test_static_rules(
    tmp_path: Path, params_file: Path, policy: str, prompt_len: int, queued: int, path: str, reason: str
) -> None:
    d = decider(tmp_path, params_file, readings={}, policy=policy, threshold_tokens=1000, max_queue_depth=2)
    for _ in range(queued + 1):  # the first runs, the rest wait
        d.ledger.prefill_ticket("p0", 100)
    choice = d.decide(prompt_len, 10, "d0", ("p0",))
    assert (choice.path, choice.reason, choice.decided_by) == (path, reason, f"rule:{policy}")


def test_ledger_orders_by_load_and_tries_engines_marked_down_last() -> None:
    ledger = Ledger(down_s=5.0)
    ledger.decode_ticket("a", 100)
    ledger.decode_ticket("b", 10)
    ledger.decode_ticket("b", 10)
    assert ledger.by_load(["a", "b", "c"], 0.0) == ["c", "a", "b"]
    ledger.mark_down("c", 0.0)
    assert ledger.by_load(["a", "b", "c"], 1.0) == ["a", "b", "c"]
    assert ledger.by_load(["a", "b", "c"], 6.0)[0] == "c"  # its time is up: tried again


def test_the_running_prefills_time_is_from_when_each_became_the_oldest_on_its_engine() -> None:
    clock = [100.0]
    ledger = Ledger(down_s=5.0, clock=lambda: clock[0])
    assert ledger.pool_view(["p0", "p1"], 100.0).running_elapsed_ms is None  # nothing runs
    first = ledger.prefill_ticket("p0", 700)  # an idle engine: it starts now
    clock[0] = 100.2
    second = ledger.prefill_ticket("p0", 900)  # waits behind it
    assert ledger.pool_view(["p0"], 100.5).running_elapsed_ms == pytest.approx(500.0)
    clock[0] = 100.6
    second.close()  # a queued one leaves (cancelled): the running one keeps its start
    assert ledger.pool_view(["p0"], 100.8).running_elapsed_ms == pytest.approx(800.0)
    third = ledger.prefill_ticket("p0", 300)
    clock[0] = 101.0
    first.close()  # answered: the next starts now
    view = ledger.pool_view(["p0"], 101.25)
    assert (view.running_requests, view.running_tokens) == (1, 300)
    assert view.running_elapsed_ms == pytest.approx(250.0)
    ledger.prefill_ticket("p1", 100)  # p1 idle: starts at 101.0
    assert ledger.pool_view(["p0", "p1"], 101.5).running_elapsed_ms == pytest.approx(500.0)  # mean
    third.close()
    assert ledger.load("p0").prefills == {}


def test_the_decision_reads_how_long_the_running_prefill_has_run(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    d = decider(tmp_path, queue_aware_params_file, readings={})
    d.ledger.clock = lambda: 9.7  # the running prefill started 300 ms before the decision at 10.0
    d.ledger.prefill_ticket("p0", 2000)
    d.ledger.prefill_ticket("p0", 2000)
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))
    assert inputs.prefill_running_elapsed_ms == pytest.approx(300.0)
    assert sources["prefill_running_elapsed_ms"] == "proxy"
    idle = decider(tmp_path, queue_aware_params_file, readings={})
    assert idle.inputs(1000, 50, "d0", ("p0",))[0].prefill_running_elapsed_ms is None


def test_the_least_tpot_slack_is_of_the_decodes_still_in_time_at_the_engines_pace() -> None:
    ledger = Ledger(down_s=5.0)
    assert ledger.tpot_slacks_ms("d0", 0.0, 100.0)[0] is None  # nothing decodes
    a = ledger.decode_ticket("d0", 500, output_len=21)  # 20 gaps: 2,000 ms of TPOT budget
    a.first_token(10.0)
    a.progress(10.0, 1, 10.0)
    assert ledger.tpot_slacks_ms("d0", 10.0, 100.0)[0] is None  # no pace known yet
    for i in range(1, 5):  # four 30 ms steps
        a.progress(10.0, 1 + i, 10.0 + 0.03 * i)
    a.progress(10.0, 6, 10.72)  # one 600 ms stall: a rare gap, not the pace
    assert statistics.median(ledger.load("d0").gaps) == pytest.approx(0.03)
    # At 10.72: 2,000 ms less 720 ms run less 15 tokens to go at 30 ms.
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] == pytest.approx(2000 - 720 - 450)
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[1] is None  # no second
    # A second request, ahead in its budget, does not lower the least: it is the second least.
    b = ledger.decode_ticket("d0", 1, output_len=41, first_at=10.6, num_tokens=1)  # a hand-off
    assert ledger.tpot_slacks_ms("d0", 10.7, 100.0)[0] == pytest.approx(2000 - 700 - 15 * 30)
    b.first_token(10.7)
    b.progress(10.6, 2, 10.72)  # its first token came from the prefill engine at 10.6
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] == pytest.approx(830.0)
    second = 4000 - 120 - 39 * 30
    assert list(ledger.tpot_slacks_ms("d0", 10.72, 100.0)) == pytest.approx([830.0, second])
    # One already late (past its budget) is lost under goodput and no longer counts.
    c = ledger.decode_ticket("d0", 100, output_len=3)
    c.first_token(9.0)
    c.progress(9.0, 2, 10.72)
    assert list(ledger.tpot_slacks_ms("d0", 10.72, 100.0)) == pytest.approx([830.0, second])
    a.close()  # finished: b's own slack is the least now
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] == pytest.approx(4000 - 120 - 39 * 30)
    # A request still to be prefilled there decodes beside a prompt sent after it: its whole
    # budget, 5 gaps of 100 ms less its 5 steps at the pace, counts too.
    d = ledger.decode_ticket("d0", 300, output_len=6)
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] == pytest.approx(5 * (100 - 30))
    d.close()
    # So does one prefilling on p0 for d0: its KV joins d0's batch after the step in progress.
    e = ledger.prefill_ticket("p0", 900, decode_id="d0", output_len=4)
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] == pytest.approx(3 * (100 - 30))
    # With the model's prefill time it has the time until its prefill ends on top: a delay on
    # d0 that ends before its KV arrives costs it nothing. Here 1 ms a token, and it started
    # on an idle p0 when it was sent (the ledger's clock), so 900 ms less the time since.
    started = ledger.load("p0").running_since

    def prefill_ms(tokens: float) -> float:
        return 1.0 * tokens

    now = started + 0.2
    assert ledger.tpot_slacks_ms("d0", now, 100.0, prefill_ms)[0] == pytest.approx(3 * (100 - 30) + 700)
    # Queued behind another prompt on p1: that one's rest, then its own whole prefill.
    ahead = ledger.prefill_ticket("p1", 400)
    f = ledger.prefill_ticket("p1", 300, decode_id="d0", output_len=4)
    e.close()
    now = ledger.load("p1").running_since + 0.1
    assert ledger.tpot_slacks_ms("d0", now, 100.0, prefill_ms)[0] == pytest.approx(3 * (100 - 30) + 300 + 300)
    ahead.close()
    f.close()
    assert ledger.load("d0").incoming == {}
    b.close()
    c.close()
    assert ledger.load("d0").tickets == {}
    assert ledger.tpot_slacks_ms("d0", 10.72, 100.0)[0] is None


def test_the_pools_arrival_rate_is_the_prompt_tokens_sent_there_over_the_window() -> None:
    clock = [100.0]
    ledger = Ledger(down_s=5.0, clock=lambda: clock[0])
    assert ledger.pool_view(["p0", "p1"], 100.0).arrival_tokens_per_s == 0.0
    ledger.prefill_ticket("p0", 700)
    clock[0] = 100.5
    answered = ledger.prefill_ticket("p1", 900)
    answered.close()  # answered or not, it was sent
    assert ledger.pool_view(["p0", "p1"], 101.0).arrival_tokens_per_s == pytest.approx(1600 / RATE_WINDOW_S)
    assert ledger.pool_view(["p0"], 101.0).arrival_tokens_per_s == pytest.approx(700 / RATE_WINDOW_S)
    later = 100.0 + RATE_WINDOW_S + 0.1  # the first has left the window, the second not yet
    assert ledger.pool_view(["p0", "p1"], later).arrival_tokens_per_s == pytest.approx(900 / RATE_WINDOW_S)


def test_the_decision_reads_the_pools_arrivals_and_its_step_budget_when_set(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    unset = decider(tmp_path, queue_aware_params_file, readings={})
    unset.ledger.clock = lambda: 9.99  # the decision at 10.0: it has run 10 ms
    unset.ledger.prefill_ticket("p0", 2000)  # running
    inputs, sources = unset.inputs(100, 50, "d0", ("p0",))
    assert inputs.prefill_arrival_tokens_per_s == pytest.approx(2000 / RATE_WINDOW_S)
    assert inputs.prefill_step_tokens is None  # one prompt a step: no prompt joins it
    assert sources["prefill_arrival_tokens_per_s"] == sources["prefill_step_tokens"] == "proxy"
    joined = decider(tmp_path, queue_aware_params_file, readings={}, prefill_step_tokens=4096)
    joined.ledger.clock = lambda: 9.99
    joined.ledger.prefill_ticket("p0", 2000)
    inputs, _ = joined.inputs(100, 50, "d0", ("p0",))
    assert inputs.prefill_step_tokens == 4096
    # The prompts arriving at that rate while the running one finishes join this prompt's step.
    model = joined.store.current.model
    assert isinstance(model, QueueAwareModel)
    alone = model.decide(unset.inputs(100, 50, "d0", ("p0",))[0])
    shared = model.decide(inputs)
    assert shared.prefill_wait_ms > alone.prefill_wait_ms


def test_the_decision_reads_the_least_tpot_slack_when_a_tpot_target_is_set(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    d = decider(tmp_path, queue_aware_params_file, readings={}, default_tpot_slo_ms=100.0)
    t = d.ledger.decode_ticket("d0", 500, output_len=11)
    t.first_token(9.9)
    t.progress(9.9, 1, 9.9)
    t.progress(9.9, 2, 9.95)  # one 50 ms step
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))  # at 10.0
    assert inputs.colloc_tpot_slack_ms == pytest.approx(1000 - 100 - 9 * 50)
    assert sources["colloc_tpot_slack_ms"] == "proxy"
    assert inputs.colloc_tpot_slack2_ms is None  # one decode there
    d.ledger.decode_ticket("d0", 300, output_len=6)  # to be prefilled there: its whole budget
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))
    assert inputs.colloc_tpot_slack_ms == pytest.approx(5 * (100 - 50))  # now the least
    assert inputs.colloc_tpot_slack2_ms == pytest.approx(1000 - 100 - 9 * 50)
    assert sources["colloc_tpot_slack2_ms"] == "proxy"
    untargeted = decider(tmp_path, queue_aware_params_file, readings={})
    untargeted.ledger.engines = d.ledger.engines
    assert untargeted.inputs(1000, 50, "d0", ("p0",))[0].colloc_tpot_slack_ms is None


def test_the_decision_reads_the_requests_sent_expected_in_time_when_a_ttft_target_is_set(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    d = decider(tmp_path, queue_aware_params_file, readings={}, default_ttft_slo_ms=500.0)
    assert d.inputs(1000, 50, "d0", ("p0",))[0].colloc_feasible_routes == 0  # none sent yet
    d.ledger.route("d0", 8.5, True, [])  # expected in time
    late: list[float] = []
    d.ledger.route("d0", 9.5, False, late)  # not expected in time, no token yet
    d.ledger.route("d1", 9.5, True, [])
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))  # at 10.0: both within two seconds
    assert (inputs.colloc_feasible_routes, inputs.decode_feasible_routes) == (1, 1)
    assert sources["colloc_feasible_routes"] == sources["decode_feasible_routes"] == "proxy"
    late.append(9.9)  # its first token 400 ms after it was sent: within the 500 ms target
    assert d.ledger.feasible_routes("d0", 10.0, 500.0) == 2
    assert d.ledger.feasible_routes("d0", 10.0, 300.0) == 1  # past a 300 ms one
    assert d.ledger.feasible_routes("d0", 10.6, 500.0) == 1  # the one sent at 8.5 has dropped out
    assert d.ledger.feasible_routes("d0", 11.6, 500.0) == 0
    assert d.ledger.feasible_routes("d1", 10.6, 500.0) == 1
    # Without a TTFT target nothing reads them: sending keeps only the window (no growth).
    for k in range(1000):
        d.ledger.route("d2", 20.0 + k * 0.01, True, [])
    assert len(d.ledger.load("d2").routes) <= RATE_WINDOW_S / 0.01 + 1
    untargeted = decider(tmp_path, queue_aware_params_file, readings={})
    untargeted.ledger.engines = d.ledger.engines
    assert untargeted.inputs(1000, 50, "d0", ("p0",))[0].colloc_feasible_routes is None


def test_the_arrival_rate_is_the_requests_sent_over_the_long_window_or_since_the_first() -> None:
    ledger = Ledger(down_s=5.0, window_s=30.0)
    assert ledger.arrival_rate("d0", 100.0) == 0.0  # nothing sent yet
    ledger.count_arrival("d0", 100.0)
    # Counted for less than the window (and the two-second floor): over the floor.
    assert ledger.arrival_rate("d0", 100.5) == pytest.approx(1 / RATE_WINDOW_S)
    for k in range(1, 10):  # one a second
        ledger.count_arrival("d0", 100.0 + k)
    ledger.count_arrival("d1", 109.0)
    assert ledger.arrival_rate("d0", 110.0) == pytest.approx(10 / 10.0)  # since the first
    assert ledger.arrival_rate("d1", 110.0) == pytest.approx(1 / 10.0)
    # Past the window: its last 30 s only (the first two have dropped out, and from the deque).
    assert ledger.arrival_rate("d0", 131.5) == pytest.approx(8 / 30.0)
    assert len(ledger.load("d0").arrivals) == 8


def test_the_pools_arrival_rate_over_a_longer_window_counts_since_the_first_request() -> None:
    long, short = Ledger(5.0, lambda: 100.0, window_s=30.0), Ledger(5.0, lambda: 100.0)
    for ledger in (long, short):
        ledger.count_arrival("d0", 100.0)  # the proxy's first request
        ledger.prefill_ticket("p0", 700)  # sent at 100.0
    # Over 30 s, 11 s after the first request: 700 tokens over those 11 s; two seconds: gone.
    assert long.pool_view(["p0"], 111.0).arrival_tokens_per_s == pytest.approx(700 / 11.0)
    assert short.pool_view(["p0"], 111.0).arrival_tokens_per_s == 0.0
    # Near the window's length: over the time since the first; past it the count drops out.
    assert long.pool_view(["p0"], 129.0).arrival_tokens_per_s == pytest.approx(700 / 29.0)
    assert long.pool_view(["p0"], 130.5).arrival_tokens_per_s == 0.0


def test_the_decision_reads_the_arrival_rate_unless_its_window_is_zero(
    tmp_path: Path, queue_aware_params_file: Path
) -> None:
    d = decider(tmp_path, queue_aware_params_file, readings={})  # at 10.0
    assert d.settings.arrival_window_s == 30.0
    for t in (6.0, 7.0, 8.0, 9.0):
        d.ledger.count_arrival("d0", t)
    inputs, sources = d.inputs(1000, 50, "d0", ("p0",))
    assert inputs.colloc_arrivals_per_s == pytest.approx(4 / 4.0)  # 4 in the 4 s since the first
    assert sources["colloc_arrivals_per_s"] == "proxy"
    d.ledger.clock = lambda: 6.0
    d.ledger.prefill_ticket("p0", 800)  # sent at 6.0: 4 s before the decision
    inputs, _ = d.inputs(1000, 50, "d0", ("p0",))
    assert inputs.prefill_arrival_tokens_per_s == pytest.approx(800 / 4.0)  # over the same window
    off = decider(tmp_path, queue_aware_params_file, readings={}, arrival_window_s=0.0)
    for t in (6.0, 7.0, 8.0, 9.0):
        off.ledger.count_arrival("d0", t)
    off.ledger.clock = lambda: 6.0
    off.ledger.prefill_ticket("p0", 800)
    inputs, sources = off.inputs(1000, 50, "d0", ("p0",))
    assert inputs.colloc_arrivals_per_s is None and "colloc_arrivals_per_s" not in sources
    assert inputs.prefill_arrival_tokens_per_s == 0.0  # over two seconds, as before


def test_the_proxys_model_predicts_the_first_token_it_streams(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine], queue_aware_params_file: Path
) -> None:
    # The proxy streams the prefill engine's token first, whatever PDROUTE_FIRST_TOKEN says
    # (that setting is the service's, for its gateway's clients); its objective is the setting.
    proxy = start_proxy(
        tmp_path, [fakes[0]], [fakes[1]], params_path=queue_aware_params_file, objective="latency",
        first_token="decode-engine",
    )  # fmt: skip
    try:
        model = proxy.app.state.store.current.model
        assert isinstance(model, QueueAwareModel)
        assert (model.first_token, model.objective) == ("prefill-engine", "latency")
    finally:
        proxy.stop()
