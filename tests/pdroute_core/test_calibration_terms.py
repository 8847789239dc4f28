"""The calibrated terms: the split of a prediction, the params transform, bit-identity at 1."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.calibration_terms import (
    IDENTITY,
    TERMS,
    Corrections,
    calibrated_model,
    calibrated_params,
    contributions,
)
from pdroute_core.params import params_from_dict
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, RouteColumns, RouteInputs
from tests.factories import FORMS as ROUND_FORMS
from tests.factories import TEST_PARAMS

FORMS = {**ROUND_FORMS, "chunk_ms_per_token_sq": 1e-6, "chunk_ms_per_token_seq": 1e-5}
# The attention terms (a prefill's and a chunk's over its prefix), of the order a 32k fit gives.
ATTENTION = {"prefill_ms_per_token_sq": 4e-7, "chunk_ms_per_token_prefix": 8e-7}


def _model(attention: bool = False) -> QueueAwareModel:
    forms = {**FORMS, **ATTENTION} if attention else FORMS
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": forms}
    return QueueAwareModel(params_from_dict(doc))


inputs = st.builds(
    RouteInputs,
    prompt_len=st.integers(2, 20_000),
    predicted_output_len=st.integers(1, 2_000),
    system_load=st.integers(0, 200),
    decode_batch_size=st.integers(0, 200),
    chunk_size=st.integers(64, 2048),
    prefill_queue_requests=st.none() | st.integers(0, 30),
    prefill_queue_tokens=st.none() | st.integers(1, 100_000),
    prefill_running_requests=st.none() | st.integers(0, 4),
    prefill_pool_gpus=st.none() | st.integers(1, 4),
    pending_prefill_tokens=st.none() | st.integers(0, 20_000),
    decode_pending_prefill_tokens=st.none() | st.integers(0, 20_000),
    cached_prompt_tokens=st.none() | st.integers(0, 20_000),
    prefill_running_tokens=st.none() | st.integers(0, 100_000),
)


corrections = st.builds(Corrections, *[st.floats(0.5, 2.0) for _ in TERMS])


def _predicted(k: Corrections, parts: dict[str, float]) -> float:
    eff = {t: float(getattr(k, t)) * (k.prefill if t == "queue_wait" else 1.0) for t in TERMS}
    return sum(eff[t] * v for t, v in parts.items())


@settings(max_examples=300, deadline=None)
@given(x=inputs, k=corrections, attention=st.booleans())
def test_contributions_times_corrections_are_the_calibrated_models_prediction(
    x: RouteInputs, k: Corrections, attention: bool
) -> None:
    # The decode GPU's pending tokens drain during TTFT_d, which the corrections move: without
    # them the split is linear in k (with them: test_at_identity_the_split_sums_to_the_prediction).
    x = dataclasses.replace(x, decode_pending_prefill_tokens=None)
    raw = _model(attention)
    cal = calibrated_model(raw, k)
    b = cal.decide(x)
    for path, ttft, tpot in (
        (COLLOCATED, b.ttft_collocated_ms, b.tpot_collocated_ms),
        (DISAGGREGATED, b.ttft_disaggregated_ms, b.tpot_disaggregated_ms),
    ):
        parts = contributions(raw, x, path)
        assert _predicted(k, parts.ttft) == pytest.approx(ttft, rel=1e-9, abs=1e-9)
        assert _predicted(k, parts.tpot) == pytest.approx(tpot, rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(x=inputs, attention=st.booleans())
def test_identity_corrections_leave_every_answer_bit_identical(x: RouteInputs, attention: bool) -> None:
    raw = _model(attention)
    assert calibrated_model(raw, IDENTITY) is raw
    rebuilt = QueueAwareModel(calibrated_params(raw.params, IDENTITY), queue_wait_scale=1.0)
    assert rebuilt.decide(x) == raw.decide(x)


@settings(max_examples=100, deadline=None)
@given(xs=st.lists(inputs, min_size=1, max_size=20), k=corrections, attention=st.booleans())
def test_a_calibrated_model_decides_the_same_bits_one_by_one_and_vectorised(
    xs: list[RouteInputs], k: Corrections, attention: bool
) -> None:
    cal = calibrated_model(_model(attention), k)
    assert cal.decide_many(RouteColumns.from_inputs(xs)).rows() == [cal.decide(x) for x in xs]


def test_queue_wait_scale_validated() -> None:
    with pytest.raises(ValueError, match="queue_wait_scale"):
        QueueAwareModel(_model().params, queue_wait_scale=0.0)


@settings(max_examples=200, deadline=None)
@given(
    x=inputs,
    rates=st.tuples(st.floats(0.0, 1e6), st.floats(0.0, 1e6)),
)
def test_with_prefill_rates_the_split_sums_to_the_prediction(
    x: RouteInputs, rates: tuple[float, float]
) -> None:
    # The stretch of the decode step by later prompts' chunks is the chunk term's: exact at k = 1.
    x = dataclasses.replace(x, colloc_prefill_tokens_per_s=rates[0], decode_prefill_tokens_per_s=rates[1])
    b = _model().decide(x)
    for path, tpot in ((COLLOCATED, b.tpot_collocated_ms), (DISAGGREGATED, b.tpot_disaggregated_ms)):
        parts = contributions(_model(), x, path).tpot
        assert parts["decode"] + parts["chunk"] == pytest.approx(tpot, rel=1e-12)
        plain = contributions(
            _model(),
            dataclasses.replace(x, colloc_prefill_tokens_per_s=None, decode_prefill_tokens_per_s=None),
            path,
        ).tpot
        assert parts["decode"] == plain["decode"]
        if path == COLLOCATED or not x.decode_pending_prefill_tokens:
            # More chunks, never fewer; on the decode GPU with prompts pending, a rate also brings
            # more prompts ahead of the hand-off (a later TTFT), which leaves fewer of them after.
            assert parts["chunk"] >= plain["chunk"] - 1e-12 * tpot


@settings(max_examples=300, deadline=None)
@given(x=inputs)
def test_at_identity_the_split_sums_to_the_prediction(x: RouteInputs) -> None:
    # Every input drawn, the decode GPU's pending tokens and the running prefills' length included.
    b = _model().decide(x)
    for path, ttft, tpot in (
        (COLLOCATED, b.ttft_collocated_ms, b.tpot_collocated_ms),
        (DISAGGREGATED, b.ttft_disaggregated_ms, b.tpot_disaggregated_ms),
    ):
        parts = contributions(_model(), x, path)
        assert sum(parts.ttft.values()) == pytest.approx(ttft, rel=1e-12, abs=1e-12)
        assert sum(parts.tpot.values()) == pytest.approx(tpot, rel=1e-12, abs=1e-12)


def test_with_a_prefill_rate_the_split_departs_from_the_prediction_as_k_from_1() -> None:
    # Later prompts' chunks stretch the decode step by 1 / (1 - rho), and rho depends on the
    # corrections: the raw split is not the calibrated one, off by O(k - 1).
    x = RouteInputs(
        prompt_len=4000,
        predicted_output_len=50,
        system_load=0,
        decode_batch_size=8,
        chunk_size=256,
        decode_prefill_tokens_per_s=20_000.0,
        prefill_queue_requests=2,
        prefill_running_requests=1,
        prefill_pool_gpus=1,
    )
    raw = _model()
    parts = contributions(raw, x, DISAGGREGATED).tpot
    assert parts["chunk"] > 0.0  # the later prompts' chunks on the decode GPU
    gaps = []
    for e in (1e-2, 1e-3):
        k = Corrections(*[1.0 + e] * len(TERMS))
        tpot = calibrated_model(raw, k).decide(x).tpot_disaggregated_ms
        gaps.append(abs(_predicted(k, parts) - tpot))
    assert 0.0 < gaps[1] < gaps[0] / 5.0 and gaps[0] < 0.05 * tpot


def test_the_attention_terms_scale_with_the_prefill_and_chunk_corrections() -> None:
    q = calibrated_params(_model(True).params, Corrections(prefill=1.5, chunk=0.5)).queue_aware
    assert q is not None
    assert q.prefill_ms_per_token_sq == 1.5 * ATTENTION["prefill_ms_per_token_sq"]
    assert q.chunk_ms_per_token_prefix == 0.5 * ATTENTION["chunk_ms_per_token_prefix"]


def test_an_idle_gpus_chunked_prompt_splits_its_prefix_term_off_to_the_chunk() -> None:
    x = RouteInputs(4096, 10, 0, 0, 512, pending_prefill_tokens=0, prefill_queue_requests=0)
    parts = contributions(_model(True), x, COLLOCATED).ttft
    assert set(parts) == {"prefill", "chunk"} and parts["chunk"] > 0
    assert set(contributions(_model(False), x, COLLOCATED).ttft) == {"prefill"}
