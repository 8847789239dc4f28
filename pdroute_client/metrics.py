"""The client's Prometheus metrics, on the registry the gateway passes in.

Without a registry the client keeps its metrics on a private one (never the process-wide
default registry, which a gateway may export for its own purposes): pass ``registry=`` to
export them. One client per registry (the names are fixed).

- ``pdroute_client_answers_total{tier, cause}``: answers by tier and why (``Cause``)
- ``pdroute_client_answer_seconds{tier}``: the whole call, as the gateway waits for it
- ``pdroute_client_remote_seconds{outcome}``: the remote call alone (``ok`` or the failure cause)
- ``pdroute_client_breaker_state{state}``: 1 for the breaker's current state, 0 for the others
- ``pdroute_client_breaker_transitions_total{state}``: transitions into each state
- ``pdroute_client_params_refresh_total{result}``: ``updated``, ``not_modified``, ``failed``
- ``pdroute_client_params_info{params_id, model}``: 1 for the params the local tier holds
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pdroute_client.answer import TIERS, Cause
from pdroute_client.breaker import CLOSED, STATES, State

# Decision calls take milliseconds: buckets from 0.1 ms to 1 s.
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
REFRESH_RESULTS = ("updated", "not_modified", "failed")


class ClientMetrics:
    """Every metric of one client, registered on ``registry`` (a private one when ``None``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.answers = Counter(
            "pdroute_client_answers", "Answers by tier and cause", ["tier", "cause"], registry=r
        )
        self.answer_seconds = Histogram(
            "pdroute_client_answer_seconds", "Decision call time", ["tier"], buckets=_BUCKETS, registry=r
        )
        self.remote_seconds = Histogram(
            "pdroute_client_remote_seconds", "Remote call time", ["outcome"], buckets=_BUCKETS, registry=r
        )
        self.breaker_state = Gauge(
            "pdroute_client_breaker_state", "1 for the breaker's current state", ["state"], registry=r
        )
        self.breaker_transitions = Counter(
            "pdroute_client_breaker_transitions", "Breaker transitions by new state", ["state"], registry=r
        )
        self.refreshes = Counter(
            "pdroute_client_params_refresh", "GET /params refreshes by result", ["result"], registry=r
        )
        self.params_info = Gauge(
            "pdroute_client_params_info",
            "The params the local tier holds",
            ["params_id", "model"],
            registry=r,
        )
        # Every label value exists from the start, so a dashboard sees zeros, not gaps.
        for tier in TIERS:
            self.answer_seconds.labels(tier)
            for cause in Cause.ALL:
                self.answers.labels(tier, cause)
        for outcome in (Cause.OK, Cause.TIMEOUT, Cause.UNREACHABLE, Cause.SERVER_ERROR, Cause.BAD_ANSWER):
            self.remote_seconds.labels(outcome)
        for state in STATES:
            self.breaker_transitions.labels(state)
        for result in REFRESH_RESULTS:
            self.refreshes.labels(result)
        self.set_breaker_state(CLOSED)

    def set_breaker_state(self, state: State) -> None:
        for s in STATES:
            self.breaker_state.labels(s).set(1 if s == state else 0)

    def breaker_changed(self, state: State) -> None:
        self.set_breaker_state(state)
        self.breaker_transitions.labels(state).inc()

    def params_loaded(self, params_id: str, model: str) -> None:
        self.params_info.clear()
        self.params_info.labels(params_id, model).set(1)
