"""The queue-aware forms on columns carry the float forms' bits, element by element."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.params import params_from_dict
from pdroute_core.routing import QueueAwareModel, RouteColumns
from tests.factories import FORMS, TEST_PARAMS, random_route_inputs


def qa_model(harm_weight: float = 0.25) -> QueueAwareModel:
    forms = {**FORMS, "chunk_ms_per_token_sq": 1e-5, "chunk_ms_per_token_seq": 2e-5}
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": forms}
    return QueueAwareModel(params_from_dict(doc), harm_weight=harm_weight)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1024),  # batch
            st.integers(0, 10**6),  # context
            st.floats(0.0, 50_000.0),  # pending tokens per step
            st.integers(1, 8192),  # chunk
            st.one_of(st.just(0.0), st.just(-0.0), st.floats(0.0, 1e7)),  # rate
        ),
        min_size=1,
        max_size=30,
    )
)
def test_tpot_many_is_tpot(rows: list[tuple[int, int, float, int, float]]) -> None:
    forms = qa_model().forms
    B, K, P, c, rate = (np.array(col, dtype=np.float64) for col in zip(*rows, strict=True))
    many = forms.tpot_many(B, K, P, c, rate)
    for i, (b, k, p, ch, r) in enumerate(rows):
        one = forms.tpot(float(b), float(k), p, float(ch), r)
        assert tuple(float(part[i]) for part in many) == one


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1e7), min_size=1, max_size=30))
def test_prefill_ms_many_is_prefill_ms(tokens: list[float]) -> None:
    forms = qa_model().forms
    assert forms.prefill_ms_many(np.array(tokens)).tolist() == [forms.prefill_ms(t) for t in tokens]


@pytest.mark.parametrize("rate", [None, 0.0, -0.0])
def test_requests_without_rates_keep_decides_bits(rate: float | None) -> None:
    # Rates not reported, or reported as zero, beside one request with a positive rate.
    rows = [
        dataclasses.replace(r, colloc_prefill_tokens_per_s=rate, decode_prefill_tokens_per_s=rate)
        for r in random_route_inputs(3 * 64 + 5, seed=11)
    ]
    rows[64 + 3] = dataclasses.replace(rows[64 + 3], colloc_prefill_tokens_per_s=9_000.0)
    model = qa_model()
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]
