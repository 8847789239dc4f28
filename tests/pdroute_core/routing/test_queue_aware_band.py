"""How the targets and the costs decide: both paths feasible, costs within the margin of each other
count as equal and the lower TTFT wins; neither feasible, the path that uses less of the other
requests' targets."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.routing import RouteColumns, RouteInputs
from pdroute_core.routing.queue_aware_reasons import REASON_SLO_NONE, REASON_SLO_ONLY
from tests.factories import qa_model, route_inputs_st

INPUTS = route_inputs_st  # the scalar == vectorised property tests' requests


@settings(max_examples=400, deadline=None)
@given(INPUTS, st.sampled_from([0.0, 0.1, 0.3]))
def test_a_cost_difference_within_the_margin_is_decided_by_ttft(x: RouteInputs, margin: float) -> None:
    model = qa_model()
    model = type(model)(model.params, slo_margin=margin)
    b = model.decide(x)
    if b.reason in (REASON_SLO_ONLY, REASON_SLO_NONE):
        return
    c, d = b.cost_collocated_ms, b.cost_disaggregated_ms
    within = abs(d - c) <= margin * min(c, d)
    expected = b.ttft_disaggregated_ms < b.ttft_collocated_ms if within else d < c
    assert (b.decision == "disaggregated") == expected
    # The vectorised path decides the same.
    many = model.decide_many(RouteColumns.from_inputs([x]))
    assert bool(many.is_disaggregated[0]) == expected


def test_within_the_margin_the_lower_ttft_wins_even_at_a_higher_cost() -> None:
    # A short prompt beside 64 decodes: disaggregating onto the idle decode GPU is a little cheaper
    # end to end (97.4 against 94.5 ms with these forms), the local prefill gives the earlier
    # first token (10.7 against 19.3 ms, the decode engine's first step included).
    x = RouteInputs(200, 16, 64, 0, 512, prefill_queue_requests=0, prefill_pool_gpus=2)
    b = qa_model().decide(x)
    assert b.cost_disaggregated_ms < b.cost_collocated_ms <= 1.1 * b.cost_disaggregated_ms
    assert b.ttft_collocated_ms < b.ttft_disaggregated_ms
    assert b.decision == "collocated"
    tight = type(qa_model())(qa_model().params, slo_margin=0.0)  # no band: the cost decides
    assert tight.decide(x).decision == "disaggregated"


@settings(max_examples=400, deadline=None)
@given(INPUTS)
def test_with_neither_path_feasible_the_smaller_use_of_others_targets_wins(x: RouteInputs) -> None:
    model = qa_model()
    b = model.decide(x)
    if b.meets_slo:
        return
    assert b.reason == REASON_SLO_NONE
    ttft_slo = math.inf if x.ttft_slo_ms is None else x.ttft_slo_ms
    tpot_slo = math.inf if x.tpot_slo_ms is None else x.tpot_slo_ms
    forms = model.params.queue_aware
    assert forms is not None
    L, out, c = float(x.prompt_len), float(x.predicted_output_len), float(x.chunk_size)
    B, Bd = float(x.system_load), float(x.decode_batch_size)
    h = x.cached_prompt_tokens if x.colloc_cached_prompt_tokens is None else x.colloc_cached_prompt_tokens
    u = L - (0.0 if h is None else min(float(h), L - 1.0))  # the collocation GPU's hit
    q = 0.0 if x.prefill_queue_requests is None else float(x.prefill_queue_requests)
    G = 1.0 if x.prefill_pool_gpus is None else float(x.prefill_pool_gpus)
    slower = forms.decode_ms_per_seq + forms.decode_ms_per_context_token * (L + 0.5 * out)
    budget_c = B * (u * model.forms.chunk_ms(c, B) / (c * max(1.0, out - 1.0)) + slower) / tpot_slo
    hp = (
        0.0 if x.prefill_cached_prompt_tokens is None else min(float(x.prefill_cached_prompt_tokens), L - 1.0)
    )
    own = model.forms.prefill_ms(L - hp) + model.forms.prefix_ms(0.0, L - hp, L - hp, hp) if hp else None
    prefill = model.forms.prefill_ms(L) if own is None else own  # on the prefill GPU, its hit aside
    budget_d = q * prefill / (G * ttft_slo) + Bd * slower / tpot_slo
    expected = budget_d < budget_c  # ties collocate
    assert (b.decision == "disaggregated") == expected
    many = model.decide_many(RouteColumns.from_inputs([x]))
    assert bool(many.is_disaggregated[0]) == expected and not many.meets_slo[0]
