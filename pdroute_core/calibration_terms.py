"""The terms of the queue-aware model that online calibration corrects, and how corrections apply.

``contributions`` splits a decision's raw (uncorrected) TTFT and TPOT of one path into the
terms of ``TERMS``, read off the model's own path terms (``QueueAwareModel.collocated`` and
``disaggregated``, which ``decide`` adds up). A property test checks
that ``sum_i k_i raw_i`` equals the calibrated model's prediction; where a share itself depends
on the corrections, a prefill rate's ``rho`` or the decode GPU's pending tokens drained during
TTFT_d, only approximately, off by the order of ``k - 1``, and exactly at ``k = 1``.
``calibrated_params`` scales the fitted forms by the corrections (the bandwidth is divided by
the transfer's), and ``calibrated_model`` adds the queue-wait factor the model multiplies in;
the identity leaves the model itself. The estimator is ``pdroute_core.calibration``;
docs/calibration.md has the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pdroute_core.params import PARAM_MAX, PARAM_MIN, CostModelParams
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.queue_aware_forms import TpotTerms
from pdroute_core.routing.resolve import resolve
from pdroute_core.routing.types import DISAGGREGATED, Decision, RouteInputs

TERMS = ("prefill", "transfer", "queue_wait", "decode", "chunk")


@dataclass(frozen=True)
class Corrections:
    """One multiplicative correction per term (1 = as fitted)."""

    prefill: float = 1.0
    transfer: float = 1.0
    queue_wait: float = 1.0
    decode: float = 1.0
    chunk: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in TERMS}

    @property
    def is_identity(self) -> bool:
        return all(getattr(self, name) == 1.0 for name in TERMS)


IDENTITY = Corrections()


@dataclass(frozen=True)
class Contributions:
    """A decision's raw prediction for the path taken, split by term (ms; module docstring).

    ``ttft`` and ``tpot`` map a term to its raw share of that latency; the effective
    multiplier of ``queue_wait`` includes the prefill correction (W is made of prefills)."""

    path: Decision
    ttft: dict[str, float]
    tpot: dict[str, float]
    predicted_output_len: int


def contributions(model: QueueAwareModel, x: RouteInputs, path: Decision) -> Contributions:
    """Split the raw model's TTFT and TPOT of ``path`` into terms: the model's own path terms."""
    v = resolve(x)
    if path == DISAGGREGATED:
        dis = model.disaggregated(v)
        gap = {
            "transfer": dis.transfer,
            "decode": dis.first_steps,  # the decode engine's steps to its first token
            "chunk": dis.first_chunks,  # and its wait behind the prompts ahead there (chunk steps)
        }
        tpot = _tpot_terms(dis.tpot)
        if not model.is_prefill_token:
            ttft = {"queue_wait": dis.raw_wait, "prefill": dis.prefill, **gap}
            return Contributions(path, ttft, tpot, x.predicted_output_len)
        # The client's first token is the prefill engine's; the gap to the decode engine's comes
        # before its second, spread over the O - 1 gaps of its TPOT.
        if v.predicted_output_len > 1.0:
            D = v.predicted_output_len - 1.0
            tpot = {k: tpot.get(k, 0.0) + gap.get(k, 0.0) / D for k in ("decode", "chunk", "transfer")}
        ttft = {"queue_wait": dis.raw_wait, "prefill": dis.prefill}
        return Contributions(path, ttft, tpot, x.predicted_output_len)
    col = model.collocated(v)
    busy = v.system_load > 0.0  # else prefill-only steps on an idle GPU
    if busy:
        ttft = {"decode": col.steps_ms, "chunk": col.chunks_ms}  # the chunks with their prefix term
    elif col.prefix_ms > 0.0:
        # One pass per chunk: the passes are prefills, their attention over the prompt before
        # them is the chunk's prefix term (scaled by the chunk correction on both paths).
        ttft = {"prefill": col.ttft - col.prefix_ms, "chunk": col.prefix_ms}
    else:
        ttft = {"prefill": col.ttft}
    return Contributions(path, ttft, _tpot_terms(col.tpot), x.predicted_output_len)


def _tpot_terms(t: TpotTerms[float]) -> dict[str, float]:
    """A TPOT split: the decode step ``s``; the chunks, pending now and of later prompts (the
    stretch of the step by ``1 / (1 - rho)``, bounded by ``s + f``, is their time). Without a
    prefill rate (``rho = 0``) the split is linear in the corrections; with one, ``rho`` itself
    depends on the chunk and decode corrections, so the sum equals the calibrated prediction
    only approximately (exactly at ``k = 1``). The same holds for the disaggregated path's
    pending share while the decode GPU's pending tokens drain partly during TTFT_d (the raw
    model's ``P_left / D``; the drain depends on every correction)."""
    if t.rho == 0.0:
        return {"decode": t.step, "chunk": t.pending}
    return {"decode": t.step, "chunk": t.tpot - t.step}


def calibrated_params(params: CostModelParams, k: Corrections) -> CostModelParams:
    """``params`` with the queue-aware forms scaled by ``k`` (the bandwidth divided by ``k_x``).

    The queue wait's own factor is not a parameter: pass ``k.queue_wait`` to the model
    (``QueueAwareModel(..., queue_wait_scale=k.queue_wait)``, see ``calibrated_model``)."""
    q = params.queue_aware
    if q is None:
        raise ValueError("these params carry no queue-aware forms (schema version 1)")
    forms = dataclasses.replace(
        q,
        prefill_floor_ms=q.prefill_floor_ms * k.prefill,
        prefill_ms_per_token=q.prefill_ms_per_token * k.prefill,
        prefill_ms_per_token_sq=q.prefill_ms_per_token_sq * k.prefill,
        decode_base_ms=q.decode_base_ms * k.decode,
        decode_ms_per_seq=q.decode_ms_per_seq * k.decode,
        decode_ms_per_context_token=q.decode_ms_per_context_token * k.decode,
        chunk_ms_per_token=q.chunk_ms_per_token * k.chunk,
        chunk_ms_per_token_sq=q.chunk_ms_per_token_sq * k.chunk,
        chunk_ms_per_token_seq=q.chunk_ms_per_token_seq * k.chunk,
        chunk_ms_per_token_prefix=q.chunk_ms_per_token_prefix * k.chunk,
    )
    bandwidth = min(max(params.bandwidth_GBps / k.transfer, PARAM_MIN), PARAM_MAX)
    return dataclasses.replace(params, bandwidth_GBps=bandwidth, queue_aware=forms)


def calibrated_model(model: QueueAwareModel, k: Corrections) -> QueueAwareModel:
    """A new model on ``model``'s params scaled by ``k``; ``model`` itself when ``k`` is 1."""
    if k.is_identity:
        return model
    return QueueAwareModel(
        calibrated_params(model.params, k),
        harm_weight=model.harm_weight,
        slo_margin=model.slo_margin,
        queue_wait_scale=k.queue_wait,
        objective=model.objective,
        first_token=model.first_token,
    )
