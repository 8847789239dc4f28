"""The queue-aware model's block evaluation: per-block shortcuts and threads, decide's bits."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from pdroute_core.params import params_from_dict
from pdroute_core.routing import QueueAwareModel, RouteColumns, block_pool, queue_aware_block
from pdroute_core.routing.queue_aware import QueueAwareBatch, QueueAwareBreakdown
from pdroute_core.routing.queue_aware_block import TERMS, Answers
from tests.conftest import TEST_PARAMS
from tests.pdroute_core.routing.test_queue_aware import FORMS, _random_rows


def _model(harm_weight: float = 0.25) -> QueueAwareModel:
    forms = {**FORMS, "chunk_ms_per_token_sq": 1e-5, "chunk_ms_per_token_seq": 2e-5}
    doc: dict[str, Any] = {**TEST_PARAMS, "schema_version": 2, "queue_aware": forms}
    return QueueAwareModel(params_from_dict(doc), harm_weight=harm_weight)


def _rows(model: QueueAwareModel, cols: RouteColumns, answers: Answers) -> list[QueueAwareBreakdown]:
    return QueueAwareBatch(
        answers.is_disaggregated,
        answers.meets_slo,
        answers.reason_index,
        cols.optional,
        model.harm_weight,
        answers.terms,
    ).rows()


def _bits(answers: Answers) -> list[list[int]]:
    return [
        *(answers.terms[name].view(np.uint64).tolist() for name in TERMS),
        answers.is_disaggregated.tolist(),
        answers.meets_slo.tolist(),
        answers.reason_index.tolist(),
    ]


@pytest.mark.parametrize("missing", [0.0, 0.2])
def test_every_thread_count_gives_the_same_bits(missing: float) -> None:
    # Blocks of 2,048 requests (numpy releases the GIL in loops this long: the threads truly
    # overlap), the last one short, taken by 1, 2 or 3 threads: the same bits,
    # and decide's. missing=0: every column reported (the blocks read them as they are).
    model = _model()
    rows = _random_rows(2048 * 8 + 17, seed=3, missing=missing)
    cols = RouteColumns.from_inputs(rows)
    one = queue_aware_block.decide_many(model, cols, num_threads=1, block=2048)
    assert _rows(model, cols, one) == [model.decide(r) for r in rows]
    for num_threads in (2, 3):
        many = queue_aware_block.decide_many(model, cols, num_threads=num_threads, block=2048)
        assert _bits(many) == _bits(one)


@pytest.mark.parametrize("rate", [None, 0.0, -0.0])
def test_blocks_without_rates_keep_decides_bits(rate: float | None) -> None:
    # Rates not reported, or reported as zero, in whole blocks: those blocks skip rho. One block
    # in the middle holds a positive rate: it takes rho, its neighbours do not.
    rows = [
        dataclasses.replace(r, colloc_prefill_tokens_per_s=rate, decode_prefill_tokens_per_s=rate)
        for r in _random_rows(3 * 64 + 5, seed=11)
    ]
    rows[64 + 3] = dataclasses.replace(rows[64 + 3], colloc_prefill_tokens_per_s=9_000.0)
    model = _model()
    cols = RouteColumns.from_inputs(rows)
    answers = queue_aware_block.decide_many(model, cols, num_threads=1, block=64)
    assert _rows(model, cols, answers) == [model.decide(r) for r in rows]


def test_small_inputs_stay_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("a thread pool was asked for")

    monkeypatch.setattr(block_pool, "_get_pool", refuse)
    model = _model()
    rows = _random_rows(300, seed=5)
    cols = RouteColumns.from_inputs(rows)
    assert model.decide_many(cols).rows() == [model.decide(r) for r in rows]  # below the threshold
    queue_aware_block.decide_many(model, cols, num_threads=1, block=16)  # one thread, many blocks
    queue_aware_block.decide_many(model, cols, num_threads=4, block=1000)  # one block


def test_a_block_size_below_one_is_refused() -> None:
    cols = RouteColumns.from_inputs(_random_rows(3, seed=1))
    with pytest.raises(ValueError, match="block: expected a positive number"):
        queue_aware_block.decide_many(_model(), cols, block=0)
