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
    forms = {
        **FORMS,
        "chunk_ms_per_token_sq": 1e-5,
        "chunk_ms_per_token_seq": 2e-5,
        "prefill_ms_per_token_sq": 4e-7,
        "chunk_ms_per_token_prefix": 8e-7,
    }
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


def _pairs_by_piece(ahead: int, tokens: int, chunk: int, cached: int) -> int:
    """``sum_k s_k p_k`` by walking the pieces, step by step (integers: exact)."""
    room, done, pairs = chunk - ahead % chunk, 0, 0
    while done < tokens:
        piece = min(room, tokens - done)
        pairs += piece * (cached + done)
        done, room = done + piece, chunk
    return pairs


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 200_000),  # ahead
            st.integers(1, 100_000),  # tokens
            st.integers(1, 8192),  # chunk
            st.integers(0, 100_000),  # cached
        ),
        min_size=1,
        max_size=30,
    )
)
def test_prefix_ms_is_the_pieces_sum_and_prefix_ms_many_its_bits(
    rows: list[tuple[int, int, int, int]],
) -> None:
    forms = qa_model().forms
    e = forms.chunk_ms_per_token_prefix
    one = [forms.prefix_ms(float(a), float(u), float(c), float(h)) for a, u, c, h in rows]
    # The closed form is exact: every quantity an integer far below 2^53 (the product by e rounds once).
    assert one == [e * float(_pairs_by_piece(a, u, c, h)) for a, u, c, h in rows]
    A, U, C, H = (np.array(col, dtype=np.float64) for col in zip(*rows, strict=True))
    assert forms.prefix_ms_many(A, U, C, H).tolist() == one


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
