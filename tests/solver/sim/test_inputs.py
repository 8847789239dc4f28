"""``route_inputs``: every field of the view reaches the decision model's request."""

from __future__ import annotations

import math

from pdroute_core.routing.types import COLUMN_INPUTS
from solver.sim import RouteView
from solver.sim.inputs import route_inputs
from tests.factories import qa_model


def test_every_optional_input_is_reported_from_the_view() -> None:
    view = RouteView(
        900, 120, 7, 9, 3, 512, 11_000, 1_500, 2, 13_000, 600, 2_700, 2, 1_800, 4, 800.0, 40.0, 3_000.0, 500.0
    )
    x = route_inputs(view)
    assert x.missing() == ()  # the model assumes nothing
    expected = {
        "prompt_len": 900,
        "predicted_output_len": 120,
        "system_load": 7,
        "decode_batch_size": 9,
        "chunk_size": 512,
        "prefill_queue_requests": 3,
        "prefill_queue_tokens": 2_700,
        "prefill_running_requests": 2,
        "prefill_running_tokens": 1_800,
        "prefill_pool_gpus": 4,
        "pending_prefill_tokens": 1_500,
        "decode_pending_prefill_tokens": 600,
        "colloc_context_tokens": 11_000,
        "decode_context_tokens": 13_000,
        "cached_prompt_tokens": 0,
        "ttft_slo_ms": 800.0,
        "tpot_slo_ms": 40.0,
        "colloc_prefill_tokens_per_s": 3_000.0,
        "decode_prefill_tokens_per_s": 500.0,
        "colloc_feasible_routes": None,  # the view's, None without a TTFT target in the run
        "decode_feasible_routes": None,
        "colloc_cached_prompt_tokens": None,  # the view's, None where it is the decode target
        "prefill_cached_prompt_tokens": None,  # the view's, None without caches
        "pending_prefill_prefix_tokens": 0.0,  # the view's
        "pending_prefill_requests": 0,
        "prefill_arrival_tokens_per_s": None,  # the view's, None where the pool runs a prompt a pass
        "prefill_step_tokens": None,
    }
    assert {name: getattr(x, name) for name in expected} == expected
    # All but how long the running prefills have run, the decodes' two least TPOT slacks and the
    # arrival rate over a long window, which the simulated gateway does not report (RouteView):
    # the model answers as before the first three existed and reads the routes for the last.
    assert set(COLUMN_INPUTS) - set(expected) == {
        "prefill_running_elapsed_ms",
        "colloc_tpot_slack_ms",
        "colloc_tpot_slack2_ms",
        "colloc_arrivals_per_s",
    }
    assert x.prefill_running_elapsed_ms is None
    assert x.colloc_tpot_slack_ms is None and x.colloc_tpot_slack2_ms is None
    assert x.colloc_arrivals_per_s is None


def test_a_reported_running_time_reaches_the_model() -> None:
    view = RouteView(900, 120, 7, 9, 3, 512, prefill_running_elapsed_ms=35.5)
    assert route_inputs(view).prefill_running_elapsed_ms == 35.5
    view = RouteView(900, 120, 7, 9, 3, 512, colloc_tpot_slack_ms=410.0)
    assert route_inputs(view).colloc_tpot_slack_ms == 410.0
    view = RouteView(900, 120, 7, 9, 3, 512, colloc_feasible_routes=0, decode_feasible_routes=4)
    x = route_inputs(view)
    assert (x.colloc_feasible_routes, x.decode_feasible_routes) == (0, 4)
    view = RouteView(900, 120, 7, 9, 3, 512, cached_prompt_tokens=16, colloc_cached_prompt_tokens=640)
    x = route_inputs(view)
    assert (x.cached_prompt_tokens, x.colloc_cached_prompt_tokens) == (16, 640)
    x = route_inputs(RouteView(900, 120, 7, 9, 3, 512, prefill_cached_prompt_tokens=320))
    assert x.prefill_cached_prompt_tokens == 320
    x = route_inputs(
        RouteView(900, 120, 7, 9, 3, 512, pending_prefill_prefix_tokens=1_250.5, pending_prefill_requests=2)
    )
    assert (x.pending_prefill_prefix_tokens, x.pending_prefill_requests) == (1_250.5, 2)
    x = route_inputs(
        RouteView(900, 120, 7, 9, 3, 512, prefill_arrival_tokens_per_s=2_500.5, prefill_step_tokens=4096)
    )
    assert (x.prefill_arrival_tokens_per_s, x.prefill_step_tokens) == (2_500.5, 4096)
    assert (
        route_inputs(RouteView(900, 120, 7, 9, 3, 512, colloc_arrivals_per_s=0.75)).colloc_arrivals_per_s
        == 0.75
    )


def test_an_infinite_slo_is_no_target() -> None:
    view = RouteView(10, 1, 0, 0, 0, 256, ttft_slo_ms=math.inf, tpot_slo_ms=50.0)
    x = route_inputs(view)
    assert x.ttft_slo_ms is None and x.tpot_slo_ms == 50.0


def test_a_fleet_without_prefill_gpus_reports_a_pool_of_one() -> None:
    assert route_inputs(RouteView(10, 1, 0, 0, 0, 256, prefill_pool_gpus=0)).prefill_pool_gpus == 1


def test_the_running_prefills_length_reaches_the_wait() -> None:
    # Two running prefills on a pool of two: their length sets the residual wait, so a longer one
    # predicts a longer TTFT on the disaggregated path.
    model = qa_model()

    def wait(tokens: int) -> float:
        view = RouteView(
            900,
            120,
            0,
            0,
            1,
            512,
            prefill_running_requests=2,
            prefill_running_tokens=tokens,
            prefill_pool_gpus=2,
        )
        return model.decide(route_inputs(view)).prefill_wait_ms

    assert wait(400) < wait(4_000) < wait(40_000)
