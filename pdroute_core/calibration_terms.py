"""The terms of the queue-aware model that online calibration corrects, and how corrections apply.

``contributions`` splits a decision's raw (uncorrected) TTFT and TPOT of one path into the
terms of ``TERMS`` exactly as ``QueueAwareModel.decide`` computes them (a property test checks
that ``sum_i k_i raw_i`` equals the calibrated model's prediction; where a share itself depends
on the corrections, a prefill rate's ``rho`` or the decode GPU's pending tokens drained during
TTFT_d, only approximately, off by the order of ``k - 1``, and exactly at ``k = 1``).
``calibrated_params`` scales the fitted forms by the corrections (the bandwidth is divided by
the transfer's), and ``calibrated_model`` adds the queue-wait factor the model multiplies in;
the identity leaves the model itself. The estimator is ``pdroute_core.calibration``;
docs/calibration.md has the table.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from pdroute_core.params import PARAM_MAX, PARAM_MIN, CostModelParams
from pdroute_core.routing.queue_aware import QueueAwareModel
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
    """Split the raw model's TTFT and TPOT of ``path`` into terms, as ``QueueAwareModel.decide``."""
    L = float(x.prompt_len)
    out = float(x.predicted_output_len)
    c = float(x.chunk_size)
    h = 0.0 if x.cached_prompt_tokens is None else min(float(x.cached_prompt_tokens), L - 1.0)
    half_out = 0.5 * out
    if path == DISAGGREGATED:
        Bd = float(x.decode_batch_size)
        Pd = 0.0 if x.decode_pending_prefill_tokens is None else float(x.decode_pending_prefill_tokens)
        Kd = Bd * L if x.decode_context_tokens is None else float(x.decode_context_tokens)
        q = 0.0 if x.prefill_queue_requests is None else float(x.prefill_queue_requests)
        Q = q * L if x.prefill_queue_tokens is None else float(x.prefill_queue_tokens)
        G = 1.0 if x.prefill_pool_gpus is None else float(x.prefill_pool_gpus)
        r = (
            (G if q > 0.0 else 0.0)
            if x.prefill_running_requests is None
            else float(x.prefill_running_requests)
        )
        t_prefill = model.prefill_ms(L)
        t_ahead = model.prefill_ms(Q / q) if q > 0.0 else t_prefill
        t_run = t_ahead
        if x.prefill_running_tokens is not None and r > 0.0:
            t_run = model.prefill_ms(float(x.prefill_running_tokens) / r)
        wait = (t_run / (G + 1.0) if r >= G else 0.0) + q * t_ahead / G
        transfer = (L - h) * model.params.transfer_rate_ms_per_token
        ttft = {"queue_wait": wait, "prefill": t_prefill, "transfer": transfer}
        # The decode GPU's pending tokens left when this request decodes (the raw TTFT_d's drain).
        ttft_d = wait * model.queue_wait_scale + (t_prefill + transfer)
        step_d = model.step_ms(Bd + 1.0, Kd + L + half_out)
        f_d = model.chunk_ms(c, Bd + 1.0)
        left = max(0.0, Pd - c * ttft_d / (step_d + f_d))
        rate = 0.0 if x.decode_prefill_tokens_per_s is None else float(x.decode_prefill_tokens_per_s)
        tpot = _tpot_terms(model, Bd + 1.0, Kd + L + half_out, left / max(1.0, out - 1.0), c, rate)
        return Contributions(path, ttft, tpot, x.predicted_output_len)
    B = float(x.system_load)
    P = 0.0 if x.pending_prefill_tokens is None else float(x.pending_prefill_tokens)
    K = B * L if x.colloc_context_tokens is None else float(x.colloc_context_tokens)
    total = P + L - h
    n = math.ceil(total / c)
    rest = total - (n - 1.0) * c
    if B > 0.0:
        step = model.step_ms(B, K)
        ttft = {
            "decode": 0.5 * step + n * step,
            "chunk": (n - 1.0) * model.chunk_ms(c, B) + model.chunk_ms(rest, B),
        }
    else:
        ttft = {"prefill": model.prefill_ms(L - h) + (model.prefill_ms(P) if P > 0.0 else 0.0)}
    rate = 0.0 if x.colloc_prefill_tokens_per_s is None else float(x.colloc_prefill_tokens_per_s)
    tpot = _tpot_terms(model, B + 1.0, K + L + half_out, 0.0, c, rate)  # P: all before this prompt
    return Contributions(path, ttft, tpot, x.predicted_output_len)


def _tpot_terms(
    model: QueueAwareModel, batch: float, context: float, pending: float, c: float, rate: float
) -> dict[str, float]:
    """``QueueAwareModel.tpot_ms`` split: the decode step ``s``; the chunks, pending now and of later
    prompts (the stretch of the step by ``1 / (1 - rho)``, bounded by ``s + f``, is their time).
    Without a prefill rate (``rho = 0``) the split is linear in the corrections; with one, ``rho``
    itself depends on the chunk and decode corrections, so the sum equals the calibrated
    prediction only approximately (exactly at ``k = 1``). The same holds for the disaggregated
    path's pending share while the decode GPU's pending tokens drain partly during TTFT_d
    (``pending`` is the raw model's ``P_left / D``; the drain depends on every correction)."""
    step = model.step_ms(batch, context)
    chunk = model.chunk_ms(c, batch)
    pend = min(1.0, pending / c) * chunk
    rho = model.prefill_share(rate, step, chunk, c)
    if rho == 0.0:
        return {"decode": step, "chunk": pend}
    return {"decode": step, "chunk": min((step + pend) / (1.0 - rho), step + chunk) - step}


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
        decode_base_ms=q.decode_base_ms * k.decode,
        decode_ms_per_seq=q.decode_ms_per_seq * k.decode,
        decode_ms_per_context_token=q.decode_ms_per_context_token * k.decode,
        chunk_ms_per_token=q.chunk_ms_per_token * k.chunk,
        chunk_ms_per_token_sq=q.chunk_ms_per_token_sq * k.chunk,
        chunk_ms_per_token_seq=q.chunk_ms_per_token_seq * k.chunk,
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
    )
