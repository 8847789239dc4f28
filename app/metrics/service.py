"""Prometheus metrics, registered on an injected ``CollectorRegistry`` (never the global one).

Names follow Prometheus conventions: base units (seconds), ``_total`` counters, and bounded
label values only (decision, reason code, path, handler template, status code, reload
trigger/outcome, decision model).
Request ids never become labels.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from app.metrics.calibration import CalibrationMetrics
from app.metrics.loop import CounterChild, LoopCounter, LoopHistogram
from app.metrics.output_length import OutputLearningMetrics
from app.params_store import LoadedParams
from pdroute_core.routing import RouteInputs, all_reasons
from pdroute_core.routing.objective import ADMISSIONS
from pdroute_core.routing.types import Breakdown

# Predicted end-to-end latencies span ~10 ms (short prompt, few tokens) to minutes.
LATENCY_BUCKETS_S = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    60.0,
    120.0,
    300.0,
)
SAVING_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# Handling a /route request takes tens of microseconds in-process.
HANDLER_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
LOAD_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Metrics:
    """Every metric the service exports, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # Updated on every request, on the event loop thread only: lock-free (app.metrics.loop).
        self.decisions = LoopCounter(
            "pdroute_route_decisions",
            "Routing decisions made, by outcome and reason code (a bounded set: pdroute_core.routing).",
            ["decision", "reason"],
            registry=registry,
        )
        self.admissions = LoopCounter(
            "pdroute_route_admissions",
            "What the queue-aware model advised a gateway to do with each request it decided: admit"
            " (meets its targets), defer (misses them by no more than the model's error), shed.",
            ["admission"],
            registry=registry,
        )
        self.http_requests = LoopCounter(
            "pdroute_http_requests",
            "HTTP requests handled, by route template and status code.",
            ["handler", "code"],
            registry=registry,
        )
        self.http_duration = LoopHistogram(
            "pdroute_http_request_duration_seconds",
            "Time to handle an HTTP request inside the service, by route template.",
            ["handler"],
            buckets=HANDLER_BUCKETS_S,
            registry=registry,
        )
        self.predicted_latency = LoopHistogram(
            "pdroute_predicted_latency_seconds",
            "Predicted end-to-end latency of each path, for every routed request.",
            ["path"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.predicted_saving = LoopHistogram(
            "pdroute_predicted_saving_seconds",
            "Predicted latency of the path not taken minus the path taken, by decision.",
            ["decision"],
            buckets=SAVING_BUCKETS_S,
            registry=registry,
        )
        self.system_load = LoopHistogram(
            "pdroute_reported_system_load",
            "system_load reported by the gateway (decodes running where the request would collocate).",
            buckets=LOAD_BUCKETS,
            registry=registry,
        )
        self.decode_batch = LoopHistogram(
            "pdroute_reported_decode_batch_size",
            "decode_batch_size reported by the gateway (batch of the target decode GPU).",
            buckets=LOAD_BUCKETS,
            registry=registry,
        )
        self.params_info = Gauge(
            "pdroute_params_info",
            "The parameters being served (value 1), labelled with their identity and the decision"
            " model deciding with them (decision_model; model is the LLM they were fitted for).",
            ["model", "hardware", "transfer_path", "source", "params_id", "decision_model"],
            registry=registry,
        )
        self.params_loaded = Gauge(
            "pdroute_params_loaded_timestamp_seconds",
            "Unix time the served parameters were loaded.",
            registry=registry,
        )
        self.params_created = Gauge(
            "pdroute_params_created_timestamp_seconds",
            "Unix time the served parameters were created (metadata.created_at; 0 when unknown).",
            registry=registry,
        )
        self.params_age = Gauge(
            "pdroute_params_age_seconds",
            "Seconds since the served parameters were created (since loaded when unknown).",
            registry=registry,
        )
        self.break_even = Gauge(
            "pdroute_break_even_load",
            "system_load above which interference outweighs the KV transfer, for the served params.",
            registry=registry,
        )
        self.reloads = Counter(
            "pdroute_params_reloads",
            "Params reload attempts, by trigger (sighup, admin, watch, startup: a worker restarted on a"
            " bad file) and outcome (success, failure).",
            ["trigger", "outcome"],
            registry=registry,
        )
        self.grids_rejected = Counter(
            "pdroute_plan_grids_rejected",
            "POST /plan/grid requests refused with 429: PDROUTE_MAX_CONCURRENT_GRIDS were in progress.",
            registry=registry,
        )
        self.grids_in_progress = Gauge(
            "pdroute_plan_grids_in_progress",
            "POST /plan/grid computations running now.",
            registry=registry,
        )
        for trigger in ("sighup", "admin", "watch", "startup"):
            for outcome in ("success", "failure"):
                self.reloads.labels(trigger=trigger, outcome=outcome)
        self._reasons = frozenset(all_reasons())
        self.calibration = CalibrationMetrics(registry)
        self.output_learning = OutputLearningMetrics(registry)

    def route_recorder(self) -> Callable[[Breakdown, RouteInputs], None]:
        """A function recording one decision, with the labelled children bound once."""
        decision_children: dict[tuple[str, str], CounterChild] = {}
        reasons = self._reasons

        def decision_child(decision: str, reason: str) -> CounterChild:
            if reason not in reasons:  # a label must stay bounded whatever a model returns
                reason = "other"
            child = self.decisions.labels(decision=decision, reason=reason)
            decision_children[(decision, reason)] = child
            return child

        savings = {d: self.predicted_saving.labels(decision=d) for d in ("collocated", "disaggregated")}
        latency_c = self.predicted_latency.labels(path="collocated")
        latency_d = self.predicted_latency.labels(path="disaggregated")
        system_load = self.system_load.labels()
        decode_batch = self.decode_batch.labels()
        admissions = {a: self.admissions.labels(admission=a) for a in ADMISSIONS}

        def record(b: Breakdown, inputs: RouteInputs) -> None:
            child = decision_children.get((b.decision, b.reason))
            if child is None:
                child = decision_child(b.decision, b.reason)
            child.inc()
            admission = getattr(b, "admission", None)  # only the queue-aware model advises
            if admission is not None:
                admissions[admission].inc()
            t_c = b.t_collocated_ms
            t_d = b.t_disaggregated_ms
            latency_c.observe(t_c / 1000.0)
            latency_d.observe(t_d / 1000.0)
            savings[b.decision].observe(abs(t_c - t_d) / 1000.0)
            system_load.observe(inputs.system_load)
            decode_batch.observe(inputs.decode_batch_size)

        return record

    def set_params(self, loaded: LoadedParams, clock: Callable[[], float]) -> None:
        """Point the params gauges at a newly loaded snapshot."""
        meta = loaded.params.metadata
        self.params_info.clear()
        self.params_info.labels(
            model=meta.model,
            hardware=meta.hardware,
            transfer_path=meta.transfer_path,
            source=meta.source,
            params_id=loaded.params_id,
            decision_model=loaded.model.name,
        ).set(1)
        self.params_loaded.set(loaded.loaded_at)
        created = loaded.created_at_unix
        self.params_created.set(created if created is not None else 0.0)
        reference = created if created is not None else loaded.loaded_at
        self.params_age.set_function(lambda: clock() - reference)
        self.break_even.set(loaded.params.break_even_load)
