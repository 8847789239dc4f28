"""Routing policies: each sees only what a gateway sees when a request arrives.

A policy is a small object with one method, ``decide(view) -> PolicyAnswer``. The ``RouteView``
holds the request's prompt length, the output-length prediction, the live load of the
candidate GPUs and the run's SLO targets; never the true output length (unless the prediction
is exact) nor the future. The answer carries the decision and, for policies that predict, the
chosen path's predicted TTFT and end-to-end latency and whether no path meets the SLO.

Policies (names as on the command line):

- ``collocated``: always prefill on the decode GPU.
- ``disaggregated``: always prefill on a prefill GPU and move the KV cache.
- ``threshold``: disaggregate when the prompt's non-cached part is longer than N tokens (llm-d's
  P/D decider; its prefix-based decider compares the prompt minus the decode pod's cached
  prefix with ``nonCachedTokens``).
- ``threshold-queue``: disaggregate when the prompt's non-cached part is longer than N tokens
  *and* fewer than Q requests wait in the prefill queue (NVIDIA Dynamo's conditional
  disaggregation rule: the prefill length less the decode worker's prefix hit against
  ``max_local_prefill_length``, and ``max_prefill_queue_size``).

The non-cached part is ``prompt_len - cached_prompt_tokens`` (the decode target's prefix hit,
``solver.sim.prefix_reuse``): the whole prompt when the fleet has no prefix caches.
- ``cost-model``: pdroute's ``AnalyticalCostModel.explain`` with the live ``system_load`` and
  ``decode_batch_size``; it predicts the chosen path's latency (``ModelPolicy``).
- ``queue-aware``: pdroute's queue-, harm- and SLO-aware model (``QueueAwareModel``) on
  every signal of the view; it predicts the chosen path's TTFT and end-to-end latency and
  answers infeasible when no path meets the run's SLO (``ModelPolicy``).
- ``queue-aware+len``: ``queue-aware`` on the output-length prediction corrected online, per
  power-of-two prompt bucket, from the finished requests' observed output lengths
  (``solver.sim.output_learning``; each ``make_policy`` call starts from nothing learnt).
- ``best-static`` (sweeps only, ``solver.sim.hindsight``): the best of a grid of the rules
  above, chosen per load with hindsight.

To add a policy: write a class with ``name`` and ``decide(view) -> PolicyAnswer``, add its
name to ``POLICY_NAMES`` and a branch to ``make_policy`` (with a keyword argument for whatever
it is built from, e.g. fitted parameters); ``make_policies``, ``pdroute simulate --policies``
and ``bench.bench_decisions`` then accept the name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from pdroute_core.routing.design import AnalyticalCostModel
from pdroute_core.routing.objective import SHED
from pdroute_core.routing.queue_aware import QueueAwareModel
from pdroute_core.routing.types import COLLOCATED, DISAGGREGATED, Decision, DecisionModel
from solver.errors import InvalidSimConfig
from solver.sim.inputs import route_inputs

POLICY_NAMES = (
    "collocated",
    "disaggregated",
    "threshold",
    "threshold-queue",
    "cost-model",
    "queue-aware",
    "queue-aware+len",
)


class RouteView(NamedTuple):
    """What the gateway knows about one request and the fleet when the request arrives, by
    ``RouteInputs``' names (``pdroute_core.route_fields``; ``solver.sim.inputs`` maps the rest).

    Immutable like the core's frozen dataclasses, but a ``NamedTuple``: the simulator builds one
    per request in its hot loop, and a 16-field tuple is built five times faster.

    "Collocation GPU": the GPU that would prefill the request locally (the least-loaded decode
    GPU, or mixed GPU in the pools topology); "decode target": the GPU that would decode it if
    disaggregated (the same GPU in the conditional topology). Context tokens are counted for
    the engine step in flight: a decode that joined at step ``s0`` reads ``prompt_len + s - s0``
    KV tokens in step ``s``. Prefill tokens already carried by a started step count as done.
    """

    prompt_len: int  # tokens
    predicted_output_len: int  # tokens, from the configured predictor
    system_load: int  # decodes running on the collocation GPU
    decode_batch_size: int  # decodes running on the decode target
    prefill_queue_requests: int  # requests waiting (not started) for a prefill GPU
    chunk_size: int  # the engines' step token budget (max_num_batched_tokens), decode tokens included
    colloc_context_tokens: int = 0  # KV tokens of the collocation GPU's running decodes
    # Prompt tokens routed to the collocation GPU for local prefill and not yet in a started
    # step: the rest of its chunked-prefill queue plus prompts waiting for a batch slot.
    pending_prefill_tokens: int = 0
    colloc_num_waiting: int = 0  # requests waiting for a batch slot there (prefills and transfers)
    decode_context_tokens: int = 0  # KV tokens of the decode target's running decodes
    # Prompt tokens pending local prefill on the decode target (as on the collocation GPU).
    decode_pending_prefill_tokens: int = 0
    prefill_queue_tokens: int = 0  # prompt tokens of the requests waiting for a prefill GPU
    prefill_running_requests: int = 0  # prefills running now on prefill GPUs
    prefill_running_tokens: int = 0  # their prompt tokens
    prefill_pool_gpus: int = 0  # prefill GPUs in the fleet
    ttft_slo_ms: float = math.inf  # the run's TTFT target (ms)
    tpot_slo_ms: float = math.inf  # the run's TPOT target (ms)
    # Prompt tokens per second prefilled on the collocation GPU / the decode target over the last
    # ``PREFILL_RATE_WINDOW_MS`` (steps started then: the past only).
    colloc_prefill_tokens_per_s: float = 0.0
    decode_prefill_tokens_per_s: float = 0.0
    # Prompt tokens held in the decode target's prefix cache (0 without caches).
    cached_prompt_tokens: int = 0
    # How long the running prefills have been running (ms): not reported by the simulated
    # gateway (None), so the model takes them to be half done, as before the input existed.
    prefill_running_elapsed_ms: float | None = None
    # The collocation GPU's decodes' least TPOT slack (ms): not reported by the simulated
    # gateway (None), so the model answers as before the input existed.
    colloc_tpot_slack_ms: float | None = None
    # Requests routed to the collocation GPU / the decode target over the last
    # ``PREFILL_RATE_WINDOW_MS`` that the policy answered would make their targets or whose first
    # token came within the TTFT target by now (None: no TTFT target in the run, not reported).
    colloc_feasible_routes: int | None = None
    decode_feasible_routes: int | None = None
    # Prompt tokens held in the collocation GPU's prefix cache (the pools topology's mixed GPU;
    # None where it is the decode target, whose hit is ``cached_prompt_tokens``).
    colloc_cached_prompt_tokens: int | None = None
    # Prompt tokens held in the prefix cache of the prefill GPU a disaggregated request would be
    # placed on (per-worker queues: known at arrival; None with a shared queue or no caches).
    prefill_cached_prompt_tokens: int | None = None
    # The mean prefix (tokens) the prompt tokens pending prefill on the collocation GPU attend
    # over: each prompt's r tokens left after its first d at d + r / 2, weighted by r (0.0: none).
    pending_prefill_prefix_tokens: float = 0.0
    # Prompts pending prefill on the collocation GPU (its chunked-prefill queue and the prompts
    # waiting for a batch slot there).
    pending_prefill_requests: int = 0
    # Prompt tokens per second routed to the prefill pool over the last ``PREFILL_RATE_WINDOW_MS``
    # and the pool's token budget per step: reported where its GPUs put several prompts in a
    # step (``FleetConfig.prefill_batch_tokens``), None where each runs one prompt a pass.
    prefill_arrival_tokens_per_s: float | None = None
    prefill_step_tokens: int | None = None
    # Requests per second routed to the collocation GPU over a long window: not reported by the
    # simulated gateway (None), so the model counts the decodes coming from its two-second routes.
    colloc_arrivals_per_s: float | None = None
    # The second least TPOT slack there: not reported (None), as the least.
    colloc_tpot_slack2_ms: float | None = None


@dataclass(frozen=True, slots=True)
class PolicyAnswer:
    """A policy's answer for one request.

    ``predicted_ttft_ms`` and ``predicted_e2e_ms`` are the policy's own predictions for the
    path it chose (None when it does not predict); the simulator compares them with what the
    run produced. ``is_infeasible`` means "no path meets the SLO"; a gateway that sheds
    (``shed=True`` in the simulator) drops the requests of ``is_shed`` instead of routing them.
    """

    decision: Decision
    predicted_ttft_ms: float | None = None
    predicted_e2e_ms: float | None = None
    is_infeasible: bool = False
    # The answer's admission (``pdroute_core.routing.objective``: admit / defer / shed), None for
    # a policy that gives none; a shedding gateway then drops what is infeasible.
    admission: str | None = None

    @property
    def is_shed(self) -> bool:
        """What a shedding gateway drops: ``admission`` ``shed``, else an infeasible answer."""
        return self.is_infeasible if self.admission is None else self.admission == SHED


ANSWER_COLLOCATED = PolicyAnswer(COLLOCATED)
ANSWER_DISAGGREGATED = PolicyAnswer(DISAGGREGATED)


class Policy(Protocol):
    """A routing rule. ``name`` labels it in tables and files."""

    @property
    def name(self) -> str: ...

    def decide(self, view: RouteView) -> PolicyAnswer: ...


@dataclass(frozen=True)
class AlwaysCollocated:
    name: str = "collocated"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return ANSWER_COLLOCATED


@dataclass(frozen=True)
class AlwaysDisaggregated:
    name: str = "disaggregated"

    def decide(self, view: RouteView) -> PolicyAnswer:
        return ANSWER_DISAGGREGATED


@dataclass(frozen=True)
class PromptThreshold:
    """Disaggregate iff ``prompt_len - cached_prompt_tokens > threshold_tokens`` (llm-d's decider)."""

    threshold_tokens: int = 1000
    name: str = "threshold"

    @property
    def setting(self) -> str:
        return f"threshold T={self.threshold_tokens}"

    def decide(self, view: RouteView) -> PolicyAnswer:
        long_prompt = view.prompt_len - view.cached_prompt_tokens > self.threshold_tokens
        return ANSWER_DISAGGREGATED if long_prompt else ANSWER_COLLOCATED


@dataclass(frozen=True)
class PromptAndQueueThreshold:
    """Disaggregate iff ``prompt_len - cached_prompt_tokens > threshold_tokens`` and the prefill
    queue is short.

    NVIDIA Dynamo's conditional disaggregation: remote prefill when the prefill (less the prefix
    the decode worker holds) is longer than ``max_local_prefill_length`` and the prefill queue
    holds fewer than ``max_prefill_queue_size`` requests; otherwise prefill locally.
    """

    threshold_tokens: int = 1000
    max_queue_depth: int = 2
    name: str = "threshold-queue"

    @property
    def setting(self) -> str:
        return f"threshold-queue T={self.threshold_tokens} Q={self.max_queue_depth}"

    def decide(self, view: RouteView) -> PolicyAnswer:
        uncached = view.prompt_len - view.cached_prompt_tokens
        if uncached > self.threshold_tokens and view.prefill_queue_requests < self.max_queue_depth:
            return ANSWER_DISAGGREGATED
        return ANSWER_COLLOCATED


class ModelPolicy:
    """A ``pdroute_core.routing`` decision model on the gateway's view (``route_inputs``).

    Its predictions are the breakdown's own for the chosen path (``chosen_ttft_ms``,
    ``chosen_e2e_ms``); it answers infeasible when the breakdown says no path meets the targets
    (the design's model has no targets: never).
    """

    def __init__(self, model: DecisionModel, name: str) -> None:
        self.model = model
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def decide(self, view: RouteView) -> PolicyAnswer:
        b = self.model.decide(route_inputs(view))
        admission = getattr(b, "admission", None)  # the design's model gives none
        return PolicyAnswer(b.decision, b.chosen_ttft_ms, b.chosen_e2e_ms, not b.meets_slo, admission)


def make_policy(
    name: str,
    *,
    model: AnalyticalCostModel | None = None,
    queue_model: QueueAwareModel | None = None,
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
        return ModelPolicy(model, "cost-model")
    if name == "queue-aware":
        if queue_model is None:
            raise InvalidSimConfig(
                "policy queue-aware needs params with the queue-aware forms (--params, schema version 2)"
            )
        return ModelPolicy(queue_model, "queue-aware")
    if name == "queue-aware+len":
        if queue_model is None:
            raise InvalidSimConfig(
                "policy queue-aware+len needs params with the queue-aware forms (--params, schema version 2)"
            )
        # Imported here: output_learning builds on this module's RouteView and PolicyAnswer.
        from solver.sim.output_learning import OutputLearningPolicy

        return OutputLearningPolicy(queue_model)
    if name == BEST_STATIC:
        raise InvalidSimConfig(f"{BEST_STATIC} is a sweep of rules, not one policy: use make_policies")
    raise InvalidSimConfig(f"unknown policy {name!r} (one of {', '.join(SWEEP_NAMES)}, or all)")


# A name that only a sweep understands: the hindsight-tuned static rule (solver.sim.hindsight).
BEST_STATIC = "best-static"
SWEEP_NAMES = (*POLICY_NAMES, BEST_STATIC)


def parse_policy_names(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of names (policies and ``best-static``); order kept,
    duplicates removed. ``all`` is every policy, then ``best-static``."""
    if text.strip() == "all":
        return SWEEP_NAMES
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise InvalidSimConfig("no policy given")
    for n in names:
        if n not in SWEEP_NAMES:
            raise InvalidSimConfig(f"unknown policy {n!r} (one of {', '.join(SWEEP_NAMES)}, or all)")
    return names
