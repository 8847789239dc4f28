"""The queue-aware model's fitted step-time forms, on one request's floats and on columns.

``pdroute_core.routing.queue_aware`` holds the formulas and why they hold. Each form is written
once for floats and, beside it, once for float arrays (``*_many``) with the same IEEE operations
in the same order, so an element of a ``*_many`` result has the bits of the float form on that
element (Python's ``min``/``max`` and numpy's ``minimum``/``maximum`` agree on every value these
forms meet). ``step_ms`` and ``chunk_ms`` are plain arithmetic and take either.
"""

from __future__ import annotations

import math
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from pdroute_core.params import CostModelParams
from pdroute_core.routing.types import FloatArray

V = TypeVar("V", float, FloatArray)


class TpotTerms(NamedTuple, Generic[V]):
    """A decode step's TPOT and its parts (ms): ``min((s + pending) / (1 - rho), s + f)``."""

    step: V  # s: the decode step itself
    chunk: V  # f: a full chunk's addition to the step
    pending: V  # min(1, P / c) * f: the pending prompt tokens' share per step
    rho: V  # the share of the GPU's time on later prompts' chunks (``prefill_share``)
    tpot: V


class QueueAwareForms:
    """``T_P``, ``s`` and ``f`` on fitted ``QueueAwareParams`` (ms), and the transfer per token."""

    def __init__(self, params: CostModelParams) -> None:
        q = params.queue_aware
        if q is None:
            raise ValueError("these params carry no queue-aware forms (schema version 1)")
        self.prefill_floor_ms = float(q.prefill_floor_ms)
        self.prefill_ms_per_token = float(q.prefill_ms_per_token)
        self.prefill_knee_tokens = float(q.prefill_knee_tokens)
        self.decode_base_ms = float(q.decode_base_ms)
        self.decode_ms_per_seq = float(q.decode_ms_per_seq)
        self.decode_ms_per_context_token = float(q.decode_ms_per_context_token)
        self.chunk_ms_per_token = float(q.chunk_ms_per_token)
        self.chunk_ms_per_token_sq = float(q.chunk_ms_per_token_sq)
        self.chunk_ms_per_token_seq = float(q.chunk_ms_per_token_seq)
        self.prefill_ms_per_token_sq = float(q.prefill_ms_per_token_sq)
        self.chunk_ms_per_token_prefix = float(q.chunk_ms_per_token_prefix)
        self.transfer_ms_per_token = float(params.bytes_per_token) / (float(params.bandwidth_GBps) * 1e6)

    def prefill_ms(self, tokens: float) -> float:
        """``T_P(u)``: a prefill of ``tokens`` prompt tokens on an idle GPU (ms); its attention
        term ``prefill_ms_per_token_sq * u^2`` adds exactly 0.0 when that is 0 (the bits before it)."""
        excess = max(0.0, tokens - self.prefill_knee_tokens)
        linear = self.prefill_floor_ms + self.prefill_ms_per_token * excess
        return linear + self.prefill_ms_per_token_sq * (tokens * tokens)

    def prefill_ms_many(self, tokens: FloatArray) -> FloatArray:
        """``prefill_ms`` of each element."""
        excess = np.maximum(0.0, tokens - self.prefill_knee_tokens)
        linear = self.prefill_floor_ms + self.prefill_ms_per_token * excess
        result: FloatArray = linear + self.prefill_ms_per_token_sq * (tokens * tokens)
        return result

    def prefix_ms(self, ahead: float, tokens: float, chunk: float, cached: float) -> float:
        """What the chunks of a prompt's ``tokens`` new tokens add by attending over the prompt
        before them (ms): ``chunk_ms_per_token_prefix * sum_k s_k p_k``. They enter a stream of
        ``chunk``-token steps after ``ahead`` tokens (the first piece fills what its step has
        left), and piece ``k`` of ``s_k`` tokens sits over ``p_k`` = the ``cached`` tokens and
        the pieces before it: ``sum_k s_k p_k = cached * u + (u^2 - sum_k s_k^2) / 2``, exact."""
        offset = ahead - float(math.floor(ahead / chunk)) * chunk
        first = min(tokens, chunk - offset)
        rest = tokens - first
        full = float(math.floor(rest / chunk))
        last = rest - full * chunk
        squares = first * first + full * (chunk * chunk) + last * last
        pairs = cached * tokens + 0.5 * (tokens * tokens - squares)
        return self.chunk_ms_per_token_prefix * pairs

    def prefix_ms_many(
        self, ahead: FloatArray, tokens: FloatArray, chunk: FloatArray, cached: FloatArray
    ) -> FloatArray:
        """``prefix_ms`` of each element."""
        offset = ahead - np.floor(ahead / chunk) * chunk
        first = np.minimum(tokens, chunk - offset)
        rest = tokens - first
        full = np.floor(rest / chunk)
        last = rest - full * chunk
        squares = first * first + full * (chunk * chunk) + last * last
        pairs = cached * tokens + 0.5 * (tokens * tokens - squares)
        result: FloatArray = self.chunk_ms_per_token_prefix * pairs
        return result

    def pending_prefix_ms(self, pending: float, mean_prefix: float, chunk: float) -> float:
        """What the chunks of ``pending`` prompt tokens queued ahead add by attending over their
        own prompts (ms), ``mean_prefix`` the mean prefix under them: a prompt with r tokens left
        after its first d, cut into ``chunk``-token pieces, attends over ``r d + (r^2 - sum s_k^2)
        / 2`` pairs, about ``r (d + r / 2 - chunk / 2)``; summed, ``pending * (mean_prefix - chunk
        / 2)``, at least 0. Exactly 0.0 when ``mean_prefix`` is 0 (not reported)."""
        return self.chunk_ms_per_token_prefix * (pending * max(0.0, mean_prefix - 0.5 * chunk))

    def pending_prefix_ms_many(
        self, pending: FloatArray, mean_prefix: FloatArray, chunk: FloatArray
    ) -> FloatArray:
        """``pending_prefix_ms`` of each element."""
        pairs = pending * np.maximum(0.0, mean_prefix - 0.5 * chunk)
        result: FloatArray = self.chunk_ms_per_token_prefix * pairs
        return result

    def start_all_ms(self, pending: float, batch: float, context_tokens: float, c: float) -> float:
        """Until a GPU with ``batch`` decodes holding ``context_tokens`` has started every prompt
        of its ``pending`` tokens and a step has budget left (ms): the chunk steps of all but the
        last step's tokens, ``k = ceil(max(0, pending - c_B) / c_B)`` of ``s(B, K) + f(c_B, B)``
        (idle: ``T_P(c_B)``), ``c_B = max(1, c - B)``. A request queued behind them (vLLM's
        scheduler takes its waiting line in order while the step's token budget lasts) is
        scheduled then. 0.0 when they fit one step."""
        cb = max(1.0, c - batch)
        k = math.ceil(max(0.0, pending - cb) / cb)
        if k == 0:
            return 0.0
        if batch > 0.0:
            return k * (self.step_ms(batch, context_tokens) + self.chunk_ms(cb, batch))
        return k * self.prefill_ms(cb)

    def start_all_ms_many(
        self, pending: FloatArray, batch: FloatArray, context_tokens: FloatArray, c: FloatArray
    ) -> FloatArray:
        """``start_all_ms`` of each element."""
        cb = np.maximum(1.0, c - batch)
        k = np.ceil(np.maximum(0.0, pending - cb) / cb)
        busy = k * (self.step_ms(batch, context_tokens) + self.chunk_ms(cb, batch))
        idle = k * self.prefill_ms_many(cb)
        result: FloatArray = np.where(k == 0.0, 0.0, np.where(batch > 0.0, busy, idle))
        return result

    def step_ms(self, batch: V, context_tokens: V) -> V:
        """``s(B, K)``: one decode step of ``batch`` sequences holding ``context_tokens`` (ms)."""
        step: V = (
            self.decode_base_ms
            + self.decode_ms_per_seq * batch
            + self.decode_ms_per_context_token * context_tokens
        )
        return step

    def chunk_ms(self, chunk: V, batch: V) -> V:
        """``f(c, B)``: what ``chunk`` prefill tokens add to a step of ``batch`` decodes (ms)."""
        cost: V = chunk * (
            self.chunk_ms_per_token + self.chunk_ms_per_token_sq * chunk + self.chunk_ms_per_token_seq * batch
        )
        return cost

    @staticmethod
    def prefill_share(tokens_per_s: float, step: float, chunk: float, c: float) -> float:
        """``rho``: the share of a GPU's time spent on prefill chunks of ``c`` tokens at
        ``tokens_per_s`` (each chunk adds ``chunk`` ms to a decode step of ``step`` ms).

        ``rate * f / c / 1000``, capped at ``f / (s + f)``: the share when every step carries a
        full chunk, the most chunked prefill can take (``s / (1 - rho)`` then is ``s + f``). The
        cap follows from the step forms alone and keeps ``1 - rho > 0``."""
        return max(0.0, min(tokens_per_s * chunk / c / 1000.0, chunk / (step + chunk)))

    def tpot(
        self, batch: float, context_tokens: float, pending: float, c: float, rate: float
    ) -> TpotTerms[float]:
        """``min((s + min(1, P / c) * f) / (1 - rho), s + f)``, ``s = s(B, K)``, ``f = f(c, B)``
        (``rho``: ``prefill_share``; ``pending`` is P, the pending prompt tokens per decode step:
        0 collocated and ``P_left / D`` disaggregated, ``queue_aware``'s docstring). The pending
        chunks and the later ones share one bound: a step carries at most one chunk, so no TPOT
        exceeds ``s + f`` (without a rate it never does: the bound changes no bit)."""
        step = self.step_ms(batch, context_tokens)
        chunk = self.chunk_ms(c, batch)
        share = min(1.0, pending / c) * chunk
        rho = self.prefill_share(rate, step, chunk, c)
        return TpotTerms(step, chunk, share, rho, min((step + share) / (1.0 - rho), step + chunk))

    def tpot_many(
        self,
        batch: FloatArray,
        context_tokens: FloatArray,
        pending: FloatArray,
        c: FloatArray,
        rate: FloatArray,
    ) -> TpotTerms[FloatArray]:
        """``tpot`` of each element."""
        step = self.step_ms(batch, context_tokens)
        chunk = self.chunk_ms(c, batch)
        share = np.minimum(1.0, pending / c) * chunk
        rho = np.maximum(0.0, np.minimum(rate * chunk / c / 1000.0, chunk / (step + chunk)))
        return TpotTerms(step, chunk, share, rho, np.minimum((step + share) / (1.0 - rho), step + chunk))
