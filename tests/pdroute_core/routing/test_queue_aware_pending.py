"""The queue-aware model's pending prompts in TPOT and the running prefills' length in the wait."""

from __future__ import annotations

import dataclasses

import pytest

from pdroute_core.routing import RouteColumns, RouteInputs
from tests.factories import FORMS, XFER, qa_model

# 10 decodes on each GPU, 20,000 context tokens there, chunk 256; O = 101: D = 100 decode steps.
X = RouteInputs(
    1000, 101, 10, 10, 256, colloc_context_tokens=20_000, decode_context_tokens=20_000, prefill_pool_gpus=2
)
STEP = 5.0 + 0.01 * 11 + 1e-5 * (20_000 + 1000 + 50.5)  # s(B + 1, K + L + O/2) on either GPU
CHUNK_TOKENS = 256 - 11  # the budget less the 11 decodes' tokens
CHUNK = 0.01 * CHUNK_TOKENS  # f(245, 11)


def test_collocated_tpot_does_not_depend_on_the_prompts_pending_there() -> None:
    tpots = {
        qa_model().decide(dataclasses.replace(X, pending_prefill_tokens=p)).tpot_collocated_ms
        for p in (None, 0, 100, 256, 5000, 200_000)
    }
    assert tpots == {STEP}
    # ... while its TTFT still waits for them.
    ttfts = [
        qa_model().decide(dataclasses.replace(X, pending_prefill_tokens=p)).ttft_collocated_ms
        for p in (0, 5000)
    ]
    assert ttfts[1] > ttfts[0]


def _tpot_d(x: RouteInputs) -> float:
    return qa_model().decide(x).tpot_disaggregated_ms


def test_the_decode_gpus_pending_prompts_start_before_a_hand_off_decodes() -> None:
    # The hand-off waits behind them in the engine's line (vLLM's FCFS under the step's budget):
    # none of them is left for its 100 decode steps, so its TPOT is the plain step's whatever the
    # pending tokens, while its TTFT grows with them.
    pending = (0, 2000, 8000, 20_000, 40_000)
    b = [qa_model().decide(dataclasses.replace(X, decode_pending_prefill_tokens=p)) for p in pending]
    assert [a.tpot_disaggregated_ms for a in b] == pytest.approx([STEP] * len(pending))
    ttfts = [a.ttft_disaggregated_ms for a in b]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == len(pending)


def test_the_hand_off_waits_for_the_later_of_the_pool_and_the_decode_gpus_line() -> None:
    # 20,000 tokens pending on the decode GPU take 81 chunk steps of 246 tokens (7.76 ms each,
    # 629 ms) before a hand-off's turn; a prefill pool wait shorter than that changes nothing, a
    # longer one sets the TTFT.
    x = dataclasses.replace(X, decode_pending_prefill_tokens=20_000, prefill_running_requests=2)
    b = [qa_model().decide(dataclasses.replace(x, prefill_queue_requests=q)) for q in (0, 16, 64)]
    ttfts = [a.ttft_disaggregated_ms for a in b]
    assert ttfts[0] == pytest.approx(ttfts[1]) and ttfts[2] > ttfts[1]
    assert b[1].prefill_wait_ms + 28.0 + 1000 * XFER < 81 * (5.3 + 0.01 * 246) < b[2].prefill_wait_ms


def test_a_single_output_token_takes_the_share_over_one_step() -> None:
    x = dataclasses.replace(X, predicted_output_len=1, decode_pending_prefill_tokens=1000)
    b = qa_model().decide(x)
    s = 5.0 + 0.01 * 11 + 1e-5 * (20_000 + 1000 + 0.5)
    left = max(0.0, 1000 - CHUNK_TOKENS * b.ttft_disaggregated_ms / (s + CHUNK))
    assert b.tpot_disaggregated_ms == pytest.approx(s + min(1.0, left / CHUNK_TOKENS) * CHUNK)


# --- the running prefills' length -----------------------------------------------------------------
BUSY = dataclasses.replace(X, prefill_queue_requests=3, prefill_queue_tokens=1500, prefill_running_requests=2)
T_AHEAD = 10.0 + 0.02 * (500 - 100)  # the mean prompt queued: 500 tokens -> 18 ms


def test_running_prefills_length_sets_the_residual_wait_when_the_pool_is_busy() -> None:
    b = qa_model().decide(dataclasses.replace(BUSY, prefill_running_tokens=8000))
    t_run = 10.0 + 0.02 * (4000 - 100)  # two running prefills of 4,000 tokens each: 88 ms
    assert b.prefill_wait_ms == pytest.approx(t_run / 3 + 3 * T_AHEAD / 2)
    # The decode engine's first token: 1.5 steps of its 10 decodes, then its first step with 11.
    first = 1.5 * (5.0 + 0.01 * 10 + 1e-5 * 20_000) + (5.0 + 0.01 * 11 + 1e-5 * 21_000)
    assert b.ttft_disaggregated_ms == pytest.approx(b.prefill_wait_ms + 28.0 + 1000 * XFER + first)
    waits = [
        qa_model().decide(dataclasses.replace(BUSY, prefill_running_tokens=y)).prefill_wait_ms
        for y in (0, 1000, 4000, 16_000)
    ]
    assert waits == sorted(waits) and len(set(waits)) == 4


def test_running_prefills_length_has_no_effect_with_a_free_prefill_gpu() -> None:
    free = dataclasses.replace(BUSY, prefill_running_requests=1)  # r < G
    plain = qa_model().decide(free)
    for y in (0, 4000, 10**6):
        assert qa_model().decide(dataclasses.replace(free, prefill_running_tokens=y)) == plain
    # r = 0: nothing running to divide among, the old form.
    idle = dataclasses.replace(X, prefill_running_requests=0, prefill_pool_gpus=None)
    assert qa_model().decide(dataclasses.replace(idle, prefill_running_tokens=500)) == qa_model().decide(idle)


def test_without_running_length_the_wait_keeps_its_bits() -> None:
    b = qa_model().decide(BUSY)
    assert b.prefill_wait_ms == T_AHEAD / 3.0 + 3.0 * T_AHEAD / 2.0  # the old form, bit for bit
    assert "prefill_running_tokens" not in b.assumed
    assert (
        "prefill_running_tokens"
        not in qa_model().decide(dataclasses.replace(BUSY, prefill_running_tokens=1)).assumed
    )


def test_vectorised_mixes_reported_and_missing_running_lengths() -> None:
    rows = [dataclasses.replace(BUSY, prefill_running_tokens=y) for y in (None, 0, 8000, None, 300_000)]
    rows += [
        dataclasses.replace(BUSY, prefill_running_requests=r, prefill_running_tokens=9000) for r in (0, 1, 2)
    ]
    model = qa_model(0.25, chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5)
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]
    assert FORMS["prefill_knee_tokens"] == 100.0  # the hand values above assume it


# --- how long the running prefills have run ---------------------------------------------------------
T_RUN = 10.0 + 0.02 * (4000 - 100)  # two running prefills of 4,000 tokens each: 88 ms
RUNNING = dataclasses.replace(BUSY, prefill_running_tokens=8000)


def _wait(elapsed_ms: float | None, x: RouteInputs = RUNNING) -> float:
    return qa_model().decide(dataclasses.replace(x, prefill_running_elapsed_ms=elapsed_ms)).prefill_wait_ms


def test_running_time_leaves_each_running_prefill_the_rest() -> None:
    # Each has t_run - E left; the first of G = 2 frees after 2 (t_run - E) / 3 on average.
    assert _wait(30.0) == pytest.approx(2 * (T_RUN - 30.0) / 3 + 3 * T_AHEAD / 2)
    # Half done is what the model assumes without it.
    assert _wait(T_RUN / 2) == pytest.approx(_wait(None))
    # Done or overdue: the first frees at once; the queue still drains G at a time.
    assert _wait(T_RUN) == _wait(10 * T_RUN) == pytest.approx(3 * T_AHEAD / 2)
    waits = [_wait(e) for e in (0.0, 20.0, 40.0, 80.0)]
    assert waits == sorted(waits, reverse=True) and len(set(waits)) == 4


def test_running_time_is_the_running_prefills_own_rest_on_one_prefill_gpu() -> None:
    one = dataclasses.replace(
        RUNNING, prefill_pool_gpus=1, prefill_running_requests=1, prefill_running_tokens=4000
    )
    assert _wait(30.0, one) == pytest.approx((T_RUN - 30.0) + 3 * T_AHEAD)


def test_running_time_has_no_effect_without_a_busy_pool_or_when_omitted() -> None:
    free = dataclasses.replace(RUNNING, prefill_running_requests=1)  # r < G: a GPU is free
    assert {_wait(e, free) for e in (None, 0.0, 50.0, 1e6)} == {_wait(None, free)}
    b = qa_model().decide(RUNNING)
    assert b.prefill_wait_ms == T_RUN / 3.0 + 3.0 * T_AHEAD / 2.0  # the form before it, bit for bit
    assert "prefill_running_elapsed_ms" not in b.assumed


def test_vectorised_mixes_reported_and_missing_running_times() -> None:
    rows = [dataclasses.replace(RUNNING, prefill_running_elapsed_ms=e) for e in (None, 0.0, 30.0, None, 1e5)]
    rows += [
        dataclasses.replace(RUNNING, prefill_running_requests=r, prefill_running_elapsed_ms=12.5)
        for r in (0, 1, 2)
    ]
    model = qa_model(0.25, chunk_ms_per_token_sq=1e-5, chunk_ms_per_token_seq=2e-5)
    assert model.decide_many(RouteColumns.from_inputs(rows)).rows() == [model.decide(r) for r in rows]
