"""Collocated or disaggregated for one request, decided in-process (pure but for the reads of
the scrape snapshot, the ledger and the params snapshot, each read once).

Inputs and where they come from (``Choice.sources``):

- ``scrape:<engine id>``: the decode engine's running requests (``system_load`` and
  ``decode_batch_size``: on this fleet the decode engine is also where a collocated prompt is
  prefilled) and its KV tokens in use, from its ``/metrics``.
- ``proxy``: what only the proxy knows because it sent it: prompt tokens sent to the decode
  engine and not yet prefilled (``pending_prefill_tokens``, ``decode_pending_prefill_tokens``),
  the prompt tokens it prefilled there over its arrival window (``colloc_prefill_tokens_per_s``,
  ``decode_prefill_tokens_per_s``: the engine's own counter also counts the prompts a KV
  connector loaded, and two seconds are too few at a request a second, ``pdroute_proxy.ledger``),
  the prefill pool's queue in requests and tokens, its running prefills, their tokens and how
  long they have run, and its engines not marked down; the decode engine's running requests
  too when no fresh scrape has them; with a TPOT target the least TPOT slack of the decode
  engine's requests and the second least (``colloc_tpot_slack_ms``, ``colloc_tpot_slack2_ms``),
  and with a TTFT target the requests sent there over the last two seconds that the model
  expected in time or whose first token came in time (``colloc_feasible_routes``,
  ``decode_feasible_routes``).
- ``request``: the prompt length and the output length (``max_tokens``, exact with
  ``ignore_eos``, else capped by the configured default), ``assumed``: the rest.

The policy is pdroute's served model (calibrated when calibration is on) or one of the static
rules of ``solver.sim.policies``, which see the same view a simulated gateway sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engines.autofill import Targets, cached_fill
from app.engines.request_fill import CAPS, SnapshotSource
from app.learners.calibration import CalibrationState
from app.learners.output_length import OutputLearningState
from app.params_store import ParamsStore
from pdroute_core.route_fields import FIELDS
from pdroute_core.routing import COLLOCATED, DISAGGREGATED, Decision, QueueAwareModel, RouteInputs
from pdroute_proxy.ledger import Ledger
from pdroute_proxy.settings import ProxySettings
from solver.sim.policies import Policy, RouteView, make_policy

PROXY = "proxy"
REQUEST = "request"
ASSUMED = "assumed"
RULE_REASONS = (
    "always_collocated",
    "always_disaggregated",
    "prompt_over_threshold",
    "prompt_within_threshold",
    "prefill_queue_full",
)


@dataclass(frozen=True)
class Choice:
    """A decision with what it was made from."""

    path: Decision
    reason: str  # the model's reason code, or one of RULE_REASONS
    decided_by: str  # the model's name, or rule:<policy>
    inputs: RouteInputs
    sources: dict[str, str]  # input field -> PROXY, REQUEST, ASSUMED or scrape:<engine id>
    predicted_ttft_ms: float | None = None
    predicted_e2e_ms: float | None = None
    admission: str | None = None  # the queue-aware model's advice: admit, defer or shed
    predicted_lateness_ms: float = 0.0  # its chosen path's TTFT past the target (ms)


def _rule_reason(policy: str, view: RouteView, path: Decision, settings: ProxySettings) -> str:
    if policy == "collocated":
        return "always_collocated"
    if policy == "disaggregated":
        return "always_disaggregated"
    if view.prompt_len <= settings.threshold_tokens:
        return "prompt_within_threshold"
    return "prompt_over_threshold" if path == DISAGGREGATED else "prefill_queue_full"


class Decider:
    """Builds each request's inputs and asks the configured policy."""

    def __init__(
        self,
        settings: ProxySettings,
        store: ParamsStore,
        ledger: Ledger,
        scraper: SnapshotSource | None,
        monotonic: Callable[[], float],
        calibration: CalibrationState | None = None,
        output_learning: OutputLearningState | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.ledger = ledger
        self.scraper = scraper
        self.monotonic = monotonic
        self.calibration = calibration
        self.output_learning = output_learning
        self.output_defaults = settings.output_len_defaults()  # parsed once
        self.rule: Policy | None = None
        if settings.policy != "pdroute":
            self.rule = make_policy(
                settings.policy,
                threshold_tokens=settings.threshold_tokens,
                max_queue_depth=settings.max_queue_depth,
            )

    def predicted_output_len(self, prompt_len: int, max_tokens: int, is_exact: bool) -> tuple[int, int]:
        """(told, corrected): ``max_tokens`` when exact (``ignore_eos``), else capped by the
        default table; then corrected by the output-length learner when it is on."""
        told = max_tokens if is_exact else min(max_tokens, self.output_defaults.for_prompt(prompt_len))
        if self.output_learning is None:
            return told, told
        return told, self.output_learning.snapshot.corrected(prompt_len, told)

    def inputs(
        self, prompt_len: int, output_len: int, decode_id: str, prefill_ids: tuple[str, ...]
    ) -> tuple[RouteInputs, dict[str, str]]:
        """The model's inputs for a request bound for ``decode_id``, and each one's source."""
        now = self.monotonic()
        values: dict[str, float | None] = {}
        sources: dict[str, str] = {"prompt_len": REQUEST, "predicted_output_len": REQUEST}
        if self.scraper is not None:
            filled = cached_fill(
                self.scraper.snapshot,
                Targets(decode=decode_id, colloc=decode_id),
                now,
                self.settings.engines_stale_s,
                CAPS,
            )
            for name, source in filled.sources(now).items():
                if name.startswith("prefill_"):
                    continue  # the pool's queue: the proxy's own accounting below is exact and fresher
                values[name] = filled.values[name]
                sources[name] = f"scrape:{source['endpoint']}"
        load = self.ledger.load(decode_id)
        pool = self.ledger.pool_view(prefill_ids, now)
        rate = self.ledger.prefill_rate(decode_id, now)  # not the scrape's counter (ledger says why)
        own: dict[str, float | None] = {
            "colloc_prefill_tokens_per_s": rate,
            "decode_prefill_tokens_per_s": rate,
            "pending_prefill_tokens": load.pending_prefill_tokens,
            "decode_pending_prefill_tokens": load.pending_prefill_tokens,
            "pending_prefill_prefix_tokens": load.pending_prefix_tokens(),
            "pending_prefill_requests": load.pending_prefill_requests,
            "prefill_queue_requests": pool.queue_requests,
            "prefill_queue_tokens": pool.queue_tokens,
            "prefill_running_requests": pool.running_requests,
            "prefill_running_tokens": pool.running_tokens,
            "prefill_running_elapsed_ms": pool.running_elapsed_ms,
            "prefill_pool_gpus": max(pool.num_engines, 1),
            "prefill_arrival_tokens_per_s": pool.arrival_tokens_per_s,
            "prefill_step_tokens": self.settings.prefill_step_tokens,
        }
        if self.settings.default_tpot_slo_ms is not None:
            slo = self.settings.default_tpot_slo_ms
            model = self.store.current.model  # its prefill time: when the incoming hand-offs arrive
            prefill_ms = model.forms.prefill_ms if isinstance(model, QueueAwareModel) else None
            slacks = self.ledger.tpot_slacks_ms(decode_id, now, slo, prefill_ms)
            own["colloc_tpot_slack_ms"], own["colloc_tpot_slack2_ms"] = slacks
        if self.settings.arrival_window_s > 0.0:
            own["colloc_arrivals_per_s"] = self.ledger.arrival_rate(decode_id, now)
        if self.settings.default_ttft_slo_ms is not None:
            routes = self.ledger.feasible_routes(decode_id, now, self.settings.default_ttft_slo_ms)
            own["colloc_feasible_routes"] = own["decode_feasible_routes"] = routes
        for name in ("system_load", "decode_batch_size"):
            if name not in values:
                own[name] = load.decoding
        values.update(own)
        sources.update(dict.fromkeys(own, PROXY))
        fields: dict[str, Any] = {
            k: v if v is None or FIELDS[k].kind == "float" else int(v) for k, v in values.items()
        }
        fields["system_load"] = fields.get("system_load") or 0
        fields["decode_batch_size"] = fields.get("decode_batch_size") or 0
        inputs = RouteInputs(
            prompt_len=prompt_len,
            predicted_output_len=output_len,
            chunk_size=self.settings.chunk_size,
            ttft_slo_ms=self.settings.default_ttft_slo_ms,
            tpot_slo_ms=self.settings.default_tpot_slo_ms,
            **fields,
        )
        for name in inputs.missing():
            sources.setdefault(name, ASSUMED)
        return inputs, sources

    def decide(
        self, prompt_len: int, output_len: int, decode_id: str, prefill_ids: tuple[str, ...]
    ) -> Choice:
        """The policy's answer for one request (no prefill engine configured: collocated)."""
        inputs, sources = self.inputs(prompt_len, output_len, decode_id, prefill_ids)
        if self.rule is not None:
            view = RouteView(
                prompt_len=prompt_len,
                predicted_output_len=output_len,
                system_load=inputs.system_load,
                decode_batch_size=inputs.decode_batch_size,
                prefill_queue_requests=inputs.prefill_queue_requests or 0,
                chunk_size=inputs.chunk_size,
            )
            path = self.rule.decide(view).decision
            reason = _rule_reason(self.settings.policy, view, path, self.settings)
            return Choice(path, reason, f"rule:{self.settings.policy}", inputs, sources)
        loaded = self.store.current
        model = loaded.model
        if self.calibration is not None:
            model = self.calibration.model_for(loaded.params_id, model)
        b = model.decide(inputs)
        return Choice(
            b.decision,
            b.reason,
            model.name,
            inputs,
            sources,
            b.chosen_ttft_ms,
            b.chosen_e2e_ms,
            getattr(b, "admission", None),  # the design model advises nothing
            getattr(b, "predicted_lateness_ms", 0.0),
        )


__all__ = ["ASSUMED", "COLLOCATED", "DISAGGREGATED", "PROXY", "REQUEST", "Choice", "Decider"]
