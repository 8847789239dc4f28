"""The queue-aware model's vectorised forms against decide's scalar expressions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.params import params_from_dict
from pdroute_core.routing import QueueAwareModel
from pdroute_core.routing.queue_aware_kernels import first_max, first_max_of_four, tpot_into
from pdroute_core.routing.types import FloatArray
from tests.conftest import TEST_PARAMS
from tests.pdroute_core.routing.test_queue_aware import FORMS

_any_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.0, math.nan])
)
Row = tuple[float, float, float, float]
_rows = st.lists(st.tuples(_any_float, _any_float, _any_float, _any_float), min_size=1, max_size=30)


def _no_nan(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def _decides_loop(rows: list[Row]) -> list[int]:
    # decide: a component replaces the best so far only when strictly greater (NaN never does).
    expected = []
    for diffs in rows:
        best = 0
        for k in range(1, 4):
            if diffs[k] > diffs[best]:
                best = k
        expected.append(best)
    return expected


def _columns(rows: list[Row]) -> list[FloatArray]:
    return [np.array(column, dtype=np.float64) for column in zip(*rows, strict=True)]


@settings(max_examples=200, deadline=None)
@given(_rows)
def test_first_max_is_decides_loop(rows: list[Row]) -> None:
    best_index = np.empty(len(rows), dtype=np.int64)
    scratch = np.empty(len(rows), dtype=np.int64)
    first_max(tuple(_columns(rows)), best_index, np.empty(len(rows), dtype=np.bool_), scratch)
    assert best_index.tolist() == _decides_loop(rows)


@settings(max_examples=300, deadline=None)
@given(_rows, st.booleans())
def test_first_max_of_four_is_decides_loop(rows: list[Row], finite: bool) -> None:
    # finite: the knock-out path (no NaN); otherwise NaN, +-inf and +-0 mixed (mostly the exact loop).
    if finite:
        rows = [(_no_nan(a), _no_nan(b), _no_nan(c), _no_nan(d)) for a, b, c, d in rows]
    v0, v1, v2, v3 = _columns(rows)
    m = len(rows)
    best = np.empty(m, dtype=np.uint8)
    flags = (np.empty(m, dtype=np.bool_), np.empty(m, dtype=np.bool_), np.empty(m, dtype=np.bool_))
    first_max_of_four((v0, v1, v2, v3), best, (np.empty(m), np.empty(m)), flags)
    assert best.tolist() == _decides_loop(rows)


def _model(harm_weight: float = 0.25) -> QueueAwareModel:
    forms = {**FORMS, "chunk_ms_per_token_sq": 1e-5, "chunk_ms_per_token_seq": 2e-5}
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": forms}
    return QueueAwareModel(params_from_dict(doc), harm_weight=harm_weight)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1024),  # batch (B + 1 taken inside, as decide)
            st.integers(0, 10**6),  # context
            st.integers(1, 100_000),  # prompt
            st.integers(1, 20_000),  # output
            st.integers(0, 50_000),  # pending
            st.integers(1, 8192),  # chunk
            st.one_of(st.just(0.0), st.just(-0.0), st.floats(0.0, 1e7)),  # rate
        ),
        min_size=1,
        max_size=30,
    )
)
def test_tpot_into_is_tpot_ms(rows: list[tuple[int, int, int, int, int, int, float]]) -> None:
    # Every rate zero: the shortcut without rho (rate None); otherwise rho per request.
    model = _model()
    B, K, L, out_len, P, c, rate = (np.array(col, dtype=np.float64) for col in zip(*rows, strict=True))
    half_out = out_len * 0.5
    c_lin = c * model._i2 + model._i1
    out = np.empty(len(rows))
    temps = (np.empty(len(rows)), np.empty(len(rows)), np.empty(len(rows)), np.empty(len(rows)))
    idle = not rate.any()
    tpot_into(model, B, K, L, half_out, P, c, c_lin, None if idle else rate, out, temps)
    expected = [
        model.tpot_ms(float(b) + 1.0, float(k) + float(ell) + 0.5 * float(o), float(p), float(ch), r)
        for b, k, ell, o, p, ch, r in rows
    ]
    assert out.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1024),  # batch
            st.integers(0, 10**6),  # context
            st.integers(1, 100_000),  # prompt
            st.integers(1, 20_000),  # output
            st.integers(0, 500_000),  # pending on the decode GPU
            st.integers(1, 8192),  # chunk
            st.floats(0.0, 1e5),  # TTFT_d (ms)
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_tpot_into_drains_the_pending_tokens_as_decide(
    rows: list[tuple[int, int, int, int, int, int, float]], with_rate: bool
) -> None:
    # The disaggregated share: max(0, P' - c * TTFT_d / (s + f)) / max(1, O - 1), then tpot_ms.
    model = _model()
    B, K, L, out_len, Pd, c, ttft = (np.array(col, dtype=np.float64) for col in zip(*rows, strict=True))
    rate = np.full(len(rows), 3000.0) if with_rate else None
    half_out = out_len * 0.5
    c_lin = c * model._i2 + model._i1
    out, left = np.empty(len(rows)), np.empty(len(rows))
    temps = (np.empty(len(rows)), np.empty(len(rows)), np.empty(len(rows)), np.empty(len(rows)))
    steps = np.maximum(1.0, out_len - 1.0)
    tpot_into(model, B, K, L, half_out, 0.0, c, c_lin, rate, out, temps, (Pd, ttft, steps, left))
    expected = []
    for b, k, ell, o, pd, ch, t in rows:
        ctx = float(k) + float(ell) + 0.5 * float(o)
        s, f = model.step_ms(float(b) + 1.0, ctx), model.chunk_ms(float(ch), float(b) + 1.0)
        share = max(0.0, float(pd) - float(ch) * t / (s + f)) / max(1.0, float(o) - 1.0)
        expected.append(model.tpot_ms(float(b) + 1.0, ctx, share, float(ch), 3000.0 if with_rate else 0.0))
    assert out.tolist() == expected
