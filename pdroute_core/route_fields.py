"""The ``/route`` request's fields, once: name, type, bounds, default, whether it is assumed, doc.

Every view of a request is derived from ``ROUTE_FIELDS`` or checked against it: the service's
request schema (``app.schemas.RouteRequest`` builds each field's pydantic constraints and
description here), the gateway client's local checks (``pdroute_client.query``), the decision
models' ``RouteInputs`` and ``RouteColumns`` (``pdroute_core.routing.types``: the name tuples
below) and the simulator's view (``solver.sim.policies.RouteView``, the same names). Tests
compare each declared class with this table field by field.

``default`` is what a decision model takes for a field the request did not report: a number,
or a ``Default`` expression of other fields (``colloc_context_tokens``: the running decodes
each with this prompt's context, ``system_load * prompt_len``), or ``None`` where the model
reads "not reported" as such (``prefill_running_tokens``, ``prefill_running_elapsed_ms``,
``colloc_tpot_slack_ms``, ``colloc_tpot_slack2_ms``, ``colloc_feasible_routes``, ``decode_feasible_routes``,
``prefill_arrival_tokens_per_s``, ``prefill_step_tokens``, ``colloc_arrivals_per_s``: the answer is
then the one before that input existed, bit for bit; ``colloc_cached_prompt_tokens`` defaults to
``cached_prompt_tokens``, and ``prefill_cached_prompt_tokens``, ``pending_prefill_prefix_tokens``
and ``pending_prefill_requests`` to 0, with the same effect).
``pdroute_core.routing.resolve`` applies the defaults once for one request and once for
columns; ``pdroute_core.request_defaults`` applies the service's own defaults (the output
length by prompt, the SLO targets of its settings) before that.
``is_assumed``: a missing value is listed in the answer's ``assumed``.

To add an optional input: a row here, its line in ``RouteInputs``, ``RouteRequest`` and
``RouteQuery`` (declared for the type checker; the tests compare them with this table), and
its use in the model's forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pdroute_core.bounds import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DECODE_BATCH_SIZE,
    MAX_CHUNK,
    MAX_GPUS,
    MAX_LOAD,
    MAX_OUTPUT_LEN,
    MAX_PROMPT_LEN,
    MAX_SLO_MS,
    MAX_TOKENS,
    MAX_TOKENS_PER_S,
)

Default = Callable[[Any], Any]  # of the resolved fields (floats, or float columns): the same ops on both


@dataclass(frozen=True)
class RouteField:
    """One numeric input of ``/route``: its type and range (inclusive unless ``exclusive_min``),
    what a model takes when it is not reported, and its one-line doc (units in it)."""

    name: str
    kind: Literal["int", "float"]
    minimum: float
    maximum: float
    doc: str
    exclusive_min: bool = False  # True: the value must be > minimum (the SLOs)
    required: bool = False  # True: the gateway client must give it (the service: see the doc)
    default: float | Default | None = None  # module docstring
    is_assumed: bool = False  # listed in ``assumed`` when not reported
    is_load: bool = False  # engine load a scrape of the engines' metrics can report

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not accepted (as the service's schema would refuse it), or ``None``.

        Types are strict as in the schema: a bool is not a number, a float is not an integer;
        a float field takes an integer. Floats must be finite.
        """
        if isinstance(value, bool) or not isinstance(value, int | float):
            wanted = "an integer" if self.kind == "int" else "a number"
            return f"expected {wanted}, got {type(value).__name__}"
        if self.kind == "int" and not isinstance(value, int):
            return f"expected an integer, got {value!r}"
        if not math.isfinite(value):
            return f"must be finite, got {value!r}"
        if self.exclusive_min and not value > self.minimum:
            return f"must be > {self.minimum:g}, got {value!r}"
        if not self.exclusive_min and value < self.minimum:
            return f"must be >= {self.minimum:g}, got {value!r}"
        if value > self.maximum:
            return f"must be <= {self.maximum:g}, got {value!r}"
        return None


def _f(
    name: str, kind: Literal["int", "float"], minimum: float, maximum: float, doc: str, **kw: Any
) -> RouteField:
    return RouteField(name, kind, minimum, maximum, doc, **kw)


_ASSUMED_LOAD: dict[str, Any] = {"is_assumed": True, "is_load": True}

# Every numeric field of a /route request, in the request's (and ``RouteInputs``') field order.
ROUTE_FIELDS: tuple[RouteField, ...] = (
    _f("prompt_len", "int", 1, MAX_PROMPT_LEN, "prompt tokens", required=True),
    _f(
        "predicted_output_len", "int", 1, MAX_OUTPUT_LEN,
        "predicted output tokens; settings default if omitted",
    ),
    # The service also takes a request without it that names an engine target to fill it from
    # (app.engines); the client names none, so for the client it is required.
    _f(
        "system_load", "int", 0, MAX_LOAD,
        "decodes running where the request would collocate; required unless "
        "decode_target or colloc_target is named (then filled from the engine's metrics)",
        required=True,
        default=0,  # the service's, with an engine target whose metrics are not fresh: an idle GPU
    ),
    _f(
        "decode_batch_size", "int", 0, MAX_LOAD,
        "decode batch of the target decode GPU; filled from decode_target's metrics "
        "when named, else 1 when omitted",
        default=DEFAULT_DECODE_BATCH_SIZE,
    ),
    _f(
        "chunk_size", "int", 1, MAX_CHUNK,
        "the engines' token budget per step (vLLM's max_num_batched_tokens), shared by the "
        "step's decode tokens and its prefill chunk",
        default=DEFAULT_CHUNK_SIZE,
    ),
    _f(
        "prefill_queue_requests", "int", 0, MAX_LOAD,
        "requests waiting (not started) for the prefill pool (the model reads the pool as one "
        "queue its GPUs share: right for a shared queue or load-balanced placement)",
        default=0.0, **_ASSUMED_LOAD,
    ),
    _f(
        "prefill_queue_tokens", "int", 0, MAX_TOKENS, "prompt tokens of those waiting requests",
        default=lambda v: v.prefill_queue_requests * v.prompt_len, **_ASSUMED_LOAD,
    ),
    _f(
        "prefill_running_requests", "int", 0, MAX_LOAD, "prefills in progress on the prefill pool",
        # G if q > 0 else 0: G * True is G and G * False is 0.0, on floats and columns alike.
        default=lambda v: v.prefill_pool_gpus * (v.prefill_queue_requests > 0.0), **_ASSUMED_LOAD,
    ),
    _f(
        "prefill_pool_gpus", "int", 1, MAX_GPUS, "prefill GPUs sharing that queue",
        default=1.0, **_ASSUMED_LOAD,
    ),
    _f(
        "pending_prefill_tokens", "int", 0, MAX_TOKENS,
        "prompt tokens admitted to the collocation GPU and not yet prefilled",
        default=0.0, **_ASSUMED_LOAD,
    ),
    _f(
        "decode_pending_prefill_tokens", "int", 0, MAX_TOKENS,
        "prompt tokens admitted to the target decode GPU for local prefill, not yet "
        "prefilled (the same as pending_prefill_tokens when both are one GPU)",
        default=0.0, **_ASSUMED_LOAD,
    ),
    _f(
        "colloc_context_tokens", "int", 0, MAX_TOKENS,
        "KV tokens of the decodes running on the collocation GPU",
        default=lambda v: v.system_load * v.prompt_len, **_ASSUMED_LOAD,
    ),
    _f(
        "decode_context_tokens", "int", 0, MAX_TOKENS,
        "KV tokens of the decodes running on the target decode GPU",
        default=lambda v: v.decode_batch_size * v.prompt_len, **_ASSUMED_LOAD,
    ),
    _f(
        "cached_prompt_tokens", "int", 0, MAX_PROMPT_LEN,
        "prompt tokens already in the decode GPU's prefix cache (at most prompt_len)",
        default=0.0, is_assumed=True,
    ),
    _f(
        "ttft_slo_ms", "float", 0, MAX_SLO_MS,
        "time-to-first-token target in ms; PDROUTE_DEFAULT_TTFT_SLO_MS if omitted",
        exclusive_min=True, default=math.inf, is_assumed=True,
    ),
    _f(
        "tpot_slo_ms", "float", 0, MAX_SLO_MS,
        "time-per-output-token target in ms; PDROUTE_DEFAULT_TPOT_SLO_MS if omitted",
        exclusive_min=True, default=math.inf, is_assumed=True,
    ),
    # Recent prefill rates: never listed in ``assumed``; without them the model is the one
    # before they existed (no prefill of later arrivals predicted), every answer bit for bit.
    _f(
        "colloc_prefill_tokens_per_s", "float", 0, MAX_TOKENS_PER_S,
        "prompt tokens per second prefilled on the collocation GPU over the last second "
        "or two (what the gateway routed there, or the rate of vllm:prompt_tokens_total); the "
        "queue-aware model stretches the predicted decode step by the time these chunks take. "
        "If omitted, no later prefill is predicted (not listed in assumed); auto-filled from "
        "the engine's prompt-token counter when a target is named",
        default=0.0, is_load=True,
    ),
    _f(
        "decode_prefill_tokens_per_s", "float", 0, MAX_TOKENS_PER_S,
        "the same on the target decode GPU (its local prefills; equal to "
        "colloc_prefill_tokens_per_s when both are one GPU)",
        default=0.0, is_load=True,
    ),
    _f(
        "prefill_running_tokens", "int", 0, MAX_TOKENS,
        "prompt tokens of the prefills in progress on the prefill pool (what the "
        "gateway sent there that has not finished prefilling); the queue-aware model waits for "
        "the first of them to finish. If omitted, they are taken to be as long as the queued "
        "ones (not listed in assumed)",
    ),
    _f(
        "prefill_running_elapsed_ms", "float", 0, MAX_SLO_MS,
        "how long, on average, the prefills in progress on the prefill pool have been running "
        "(ms; what a gateway that sends each engine its prompts in order knows: since each "
        "reached the head of its engine's queue); the queue-aware model waits for the rest of "
        "them. If omitted, they are taken to be half done (not listed in assumed)",
    ),
    _f(
        "colloc_tpot_slack_ms", "float", 0, MAX_SLO_MS,
        "the least TPOT slack of the decodes running on the collocation GPU that are still "
        "within their TPOT target (ms): how much more delay the first of them to go late can "
        "take, tpot_slo * (O - 1) less the time since its first token and its remaining steps "
        "(what a gateway that streams their tokens knows); under goodput the queue-aware model "
        "does not collocate a prompt whose chunks would delay them by more. If omitted, none is "
        "taken to be that close (not listed in assumed)",
    ),
    _f(
        "colloc_tpot_slack2_ms", "float", 0, MAX_SLO_MS,
        "the second least TPOT slack of those decodes (ms; at least colloc_tpot_slack_ms): where "
        "only collocation serves a request in time and its chunks' delay passes both, surely, "
        "two decodes go late for it and under goodput it is not collocated. If omitted (or one "
        "decode there in time), the queue-aware model counts them by its spread test (not listed "
        "in assumed)",
    ),
    _f(
        "colloc_feasible_routes", "int", 0, MAX_LOAD,
        "requests the gateway sent to the collocation GPU over the last two seconds (to prefill "
        "or to decode there) that it was told would make their targets (meets_slo true) or "
        "whose first token came within the TTFT target; under goodput, when no path meets the "
        "targets, a GPU with none is taken to serve nobody in time, so a request that cannot "
        "make its own costs nobody there. If omitted, the GPU is taken to serve requests in "
        "time (not listed in assumed)",
    ),
    _f(
        "decode_feasible_routes", "int", 0, MAX_LOAD,
        "the same for the target decode GPU (equal to colloc_feasible_routes when both are one GPU)",
    ),
    _f(
        "colloc_cached_prompt_tokens", "int", 0, MAX_PROMPT_LEN,
        "prompt tokens already in the collocation GPU's prefix cache (at most prompt_len), where "
        "it is not the decode GPU (mixed GPUs beside a decode pool): the collocated path "
        "prefills only the rest there. If omitted, cached_prompt_tokens (both one GPU; not "
        "listed in assumed)",
        default=lambda v: v.cached_prompt_tokens,
    ),
    _f(
        "prefill_cached_prompt_tokens", "int", 0, MAX_PROMPT_LEN,
        "prompt tokens already in the prefix cache of the prefill GPU the request would be sent "
        "to (at most prompt_len; a gateway that places each prompt on a prefill engine knows "
        "it): the disaggregated path prefills only the rest there. If omitted, 0: the whole "
        "prompt (not listed in assumed)",
        default=0.0,
    ),
    _f(
        "pending_prefill_prefix_tokens", "float", 0, MAX_PROMPT_LEN,
        "the mean prefix the prompt tokens pending prefill on the collocation GPU attend over "
        "(tokens): a prompt there with r tokens left after its first d (prefilled or cached) "
        "has them at d + r / 2 on average, weighted by r (a gateway that tracks the prompts it "
        "sent each engine knows it); the queue-aware model adds what their chunks spend "
        "attending over their prompts to the collocated TTFT. If omitted, that is not modelled "
        "(not listed in assumed)",
        default=0.0,
    ),
    _f(
        "pending_prefill_requests", "int", 0, MAX_LOAD,
        "prompts pending prefill on the collocation GPU (requests the gateway sent there to "
        "prefill whose first token has not come); under goodput, when no path meets the "
        "targets, those still within the TTFT target stand for the prompts that will queue "
        "behind this one there, as the pool's queue does on the pool. If omitted, none are "
        "counted (not listed in assumed)",
        default=0.0,
    ),
    _f(
        "prefill_arrival_tokens_per_s", "float", 0, MAX_TOKENS_PER_S,
        "prompt tokens per second the gateway sent to the prefill pool lately (over two seconds "
        "or longer; pdroute proxy: the last 30 s); with prefill_step_tokens, the queue-aware "
        "model adds the prompts that will arrive before this one's step starts on a busy "
        "prefill GPU and share that step (vLLM puts every waiting prompt that fits its token "
        "budget in a step, and each gets its first token when the step ends). If omitted, not "
        "modelled (not listed in assumed)",
    ),
    _f(
        "prefill_step_tokens", "int", 1, MAX_CHUNK,
        "the prefill engines' token budget per step (their max_num_batched_tokens): how many "
        "prompt tokens one prefill step can hold. If omitted, a prefill step is taken to hold one "
        "prompt (not listed in assumed)",
    ),
    _f(
        "colloc_arrivals_per_s", "float", 0, MAX_LOAD,
        "requests per second the gateway sent to the collocation GPU (to prefill or to decode "
        "there) over a window at least as long as a long prompt's prefill there (pdroute proxy: "
        "the last 30 s); under goodput the queue-aware model counts the decodes that will join "
        "that GPU while a prompt's chunks hold it at this rate (else at colloc_feasible_routes "
        "over two seconds), and on a GPU with no decode running does not take a collocation "
        "whose chunks would make them late where at least one is expected. If omitted, the "
        "two-second routes stand for the rate (not listed in assumed)",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class RouteChoice:
    """One input of ``/route`` that names one of a few settings (not a model input: it picks
    how the model decides), with its one-line doc. Missing: the service's setting."""

    name: str
    values: tuple[str, ...]
    doc: str

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not accepted (as the service's schema would refuse it), or ``None``."""
        if not isinstance(value, str) or value not in self.values:
            return f"expected one of {', '.join(self.values)}, got {value!r}"
        return None


# Per-request overrides of a service setting (``RouteRequest``, ``RouteQuery``).
ROUTE_CHOICES: tuple[RouteChoice, ...] = (
    RouteChoice(
        "objective",
        ("latency", "goodput"),  # pdroute_core.routing.objective.OBJECTIVES (a test compares them)
        "queue-aware: what to optimise when no path meets the targets: goodput (the most requests "
        "within their targets) or latency; PDROUTE_OBJECTIVE if omitted",
    ),
)
CHOICES: dict[str, RouteChoice] = {c.name: c for c in ROUTE_CHOICES}

FIELDS: dict[str, RouteField] = {f.name: f for f in ROUTE_FIELDS}
# The window of the recent prefill rates and routes a gateway reports (``*_prefill_tokens_per_s``,
# ``*_feasible_routes``), ms: long enough to hold several prompts' chunks at moderate load, short
# enough to follow load changes within a request's decode (a few seconds).
RECENT_WINDOW_MS = 2000.0
FIELD_NAMES = tuple(FIELDS)
# The design's five inputs: every model reads them, and ``RouteInputs`` always holds them.
DESIGN_INPUTS = FIELD_NAMES[:5]
# The inputs beyond the design's: each may be missing (``None``; NaN in ``RouteColumns``).
COLUMN_INPUTS = FIELD_NAMES[5:]
# Those listed in ``assumed`` when missing, in this order.
OPTIONAL_INPUTS = tuple(f.name for f in ROUTE_FIELDS if f.is_assumed)
# Refinements never listed in ``assumed``: without them, every answer is the one before they existed.
UNLISTED_INPUTS = tuple(n for n in COLUMN_INPUTS if not FIELDS[n].is_assumed)
# The engine load a scrape can report: queue, pool and context fields (listed), rates (unlisted).
OPTIONAL_LOAD_INPUTS = tuple(n for n in OPTIONAL_INPUTS if FIELDS[n].is_load)
OPTIONAL_RATE_INPUTS = tuple(n for n in UNLISTED_INPUTS if FIELDS[n].is_load)
# Prefix-cache hits, each at most the prompt (a check across fields, the schema's and the client's).
PREFIX_HIT_INPUTS = ("cached_prompt_tokens", "colloc_cached_prompt_tokens", "prefill_cached_prompt_tokens")
