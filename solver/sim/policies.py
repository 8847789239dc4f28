"""Routing policies: each sees only what a gateway sees when a request arrives.

A policy is a small object with one method, ``decide(view) -> Decision``. The ``RouteView``
holds the request's prompt length, the output-length prediction, and the live load of the
candidate GPUs; never the true output length (unless the prediction is exact) nor the future.

Policies (names as on the command line):

- ``collocated``: always prefill on the decode GPU.
- ``disaggregated``: always prefill on a prefill GPU and move the KV cache.
- ``threshold``: disaggregate when the prompt is longer than N tokens (llm-d's P/D decider).
- ``threshold-queue``: disaggregate when the prompt is longer than N tokens *and* fewer than Q
  requests wait in the prefill queue (NVIDIA Dynamo's conditional disaggregation rule,
  ``max_local_prefill_length`` and ``max_prefill_queue_size``).
- ``cost-model``: pdroute's ``AnalyticalCostModel.route`` with the live ``system_load`` and
  ``decode_batch_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidSimConfig
from solver.routing.design import AnalyticalCostModel
from solver.routing.types import COLLOCATED, DISAGGREGATED, Decision
from solver.sim.workload import Workload

POLICY_NAMES = ("collocated", "disaggregated", "threshold", "threshold-queue", "cost-model")


@dataclass(frozen=True, slots=True)
class RouteView:
    """What the gateway knows about one request and the fleet when the request arrives."""

    prompt_len: int  # tokens
    predicted_output_len: int  # tokens, from the configured predictor
    system_load: int  # decodes running on the GPU where the request would be collocated
    decode_batch_size: int  # decodes running on the GPU it would be sent to if disaggregated
    prefill_queue_depth: int  # requests waiting (not running) for a prefill GPU
    chunk_size: int  # prefill tokens per engine step on the collocating GPU


class Policy(Protocol):
    """A routing rule. ``name`` labels it in tables and files."""

    @property
    def name(self) -> str: ...

    def decide(self, view: RouteView) -> Decision: ...


@dataclass(frozen=True)
class AlwaysCollocated:
    name: str = "collocated"

    def decide(self, view: RouteView) -> Decision:
        return COLLOCATED


@dataclass(frozen=True)
class AlwaysDisaggregated:
    name: str = "disaggregated"

    def decide(self, view: RouteView) -> Decision:
        return DISAGGREGATED


@dataclass(frozen=True)
class PromptThreshold:
    """Disaggregate iff ``prompt_len > threshold_tokens`` (llm-d's decider)."""

    threshold_tokens: int = 1000
    name: str = "threshold"

    def decide(self, view: RouteView) -> Decision:
        return DISAGGREGATED if view.prompt_len > self.threshold_tokens else COLLOCATED


@dataclass(frozen=True)
class PromptAndQueueThreshold:
    """Disaggregate iff ``prompt_len > threshold_tokens`` and the prefill queue is short.

    NVIDIA Dynamo's conditional disaggregation: remote prefill when the prefill is longer than
    ``max_local_prefill_length`` and the prefill queue holds fewer than
    ``max_prefill_queue_size`` requests; otherwise prefill locally.
    """

    threshold_tokens: int = 1000
    max_queue_depth: int = 2
    name: str = "threshold-queue"

    def decide(self, view: RouteView) -> Decision:
        if view.prompt_len > self.threshold_tokens and view.prefill_queue_depth < self.max_queue_depth:
            return DISAGGREGATED
        return COLLOCATED


class CostModelPolicy:
    """pdroute's analytical model: ``route(L, predicted_out, system_load, decode_batch)``."""

    def __init__(self, model: AnalyticalCostModel, name: str = "cost-model") -> None:
        self.model = model
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def decide(self, view: RouteView) -> Decision:
        decision, _t_c, _t_d = self.model.route(
            view.prompt_len,
            view.predicted_output_len,
            view.system_load,
            view.decode_batch_size,
            view.chunk_size,
        )
        return decision


def make_policy(
    name: str,
    *,
    model: AnalyticalCostModel | None = None,
    threshold_tokens: int = 1000,
    max_queue_depth: int = 2,
) -> Policy:
    """Build a policy by its command-line name (see the module docstring)."""
    if name == "collocated":
        return AlwaysCollocated()
    if name == "disaggregated":
        return AlwaysDisaggregated()
    if name == "threshold":
        return PromptThreshold(threshold_tokens)
    if name == "threshold-queue":
        return PromptAndQueueThreshold(threshold_tokens, max_queue_depth)
    if name == "cost-model":
        if model is None:
            raise InvalidSimConfig("policy cost-model needs the cost model's params (--params)")
        return CostModelPolicy(model)
    raise InvalidSimConfig(f"unknown policy {name!r} (one of {', '.join(POLICY_NAMES)}, or all)")


def parse_policy_names(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of policy names; order kept, duplicates removed."""
    if text.strip() == "all":
        return POLICY_NAMES
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise InvalidSimConfig("no policy given")
    for n in names:
        if n not in POLICY_NAMES:
            raise InvalidSimConfig(f"unknown policy {n!r} (one of {', '.join(POLICY_NAMES)}, or all)")
    return names


@dataclass(frozen=True)
class OutputPrediction:
    """The output length a policy is told: ``exact``, ``fixed`` (``value`` tokens) or ``mean``.

    ``mean`` is the trace-wide mean output length, rounded: what a gateway with no per-request
    predictor would use. Comparing ``exact`` with the others measures the cost of misprediction.
    """

    kind: str = "exact"
    value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("exact", "fixed", "mean"):
            raise InvalidSimConfig(f"output prediction: unknown kind {self.kind!r} (exact, fixed:N, mean)")
        if self.kind == "fixed" and (self.value is None or self.value < 1):
            raise InvalidSimConfig("output prediction: fixed needs a value >= 1 token")

    @property
    def label(self) -> str:
        return f"fixed:{self.value}" if self.kind == "fixed" else self.kind

    def predict(self, workload: Workload) -> npt.NDArray[np.int64]:
        """The prediction for every request of ``workload`` (tokens)."""
        if self.kind == "exact":
            return workload.output_len.copy()
        value = self.value if self.kind == "fixed" else round(float(np.mean(workload.output_len)))
        return np.full(workload.num_requests, max(int(value or 1), 1), dtype=np.int64)


def parse_prediction(text: str) -> OutputPrediction:
    """``exact`` | ``mean`` | ``fixed:N``."""
    kind, _, value = text.strip().partition(":")
    if kind == "fixed":
        try:
            return OutputPrediction("fixed", int(value))
        except ValueError:
            raise InvalidSimConfig(f"output prediction {text!r}: expected fixed:N with N tokens") from None
    if value:
        raise InvalidSimConfig(f"output prediction {text!r}: expected exact, mean or fixed:N")
    return OutputPrediction(kind)
