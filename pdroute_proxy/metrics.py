"""The proxy's Prometheus metrics, on the injected registry (bounded labels only).

``path`` is collocated or disaggregated (the path a request was served on, after fallbacks),
``reason`` a decision model's reason code or a static rule's, ``cause`` one of ``FALLBACK_CAUSES``,
``engine`` an endpoint id of the engines file, ``kind`` one of ``upstream.CAUSES``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pdroute_core.routing.objective import ADMISSIONS

FALLBACK_CAUSES = (
    "no_prefill_engine",  # disaggregated chosen, but the fleet has no prefill engine up
    "prefill_down",  # the prefill engine refused the connection
    "prefill_timeout",  # ... did not answer within PDROUTE_PREFILL_TIMEOUT_S
    "prefill_error",  # ... answered an error (5xx, or a broken answer)
    "prefill_rejected",  # ... answered 4xx (the decode engine then judges the request)
    "kv_handoff",  # the decode engine failed the request that loads the transferred KV
    "decode_down",  # a decode engine refused the connection: another one serves
    "decode_timeout",  # ... went silent for PDROUTE_READ_TIMEOUT_S
    "decode_error",  # ... answered an error before any token
    "decode_lost",  # ... died mid-answer: resumed elsewhere from the tokens already sent
)
OUTCOMES = ("ok", "client_error", "no_engine", "shed", "cancelled", "upstream_error")
TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
E2E_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PATHS = ("collocated", "disaggregated")


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "pdroute_proxy_decisions",
            "Decisions by the path chosen, the reason and who decided (model name or rule:<policy>).",
            ["path", "reason", "decided_by"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "pdroute_proxy_fallbacks",
            "Requests served another way than decided, by cause: a prefill engine failing means"
            " collocated on the decode engine, a decode engine failing means another one.",
            ["cause"],
            registry=registry,
        )
        self.admissions = Counter(
            "pdroute_proxy_admissions",
            "The served model's advice per decision: admit (meets its targets), defer (misses them by"
            " at most the model's error), shed (refused when PDROUTE_ADMISSION_CONTROL=shed).",
            ["admission"],
            registry=registry,
        )
        self.requests = Counter(
            "pdroute_proxy_requests",
            "Client requests by endpoint and outcome (ok, client_error, no_engine, shed, cancelled,"
            " upstream_error).",
            ["endpoint", "outcome"],
            registry=registry,
        )
        self.upstream_errors = Counter(
            "pdroute_proxy_upstream_errors",
            "Failed calls to an engine, by engine id and kind (connect, timeout, http_5xx, http_4xx,"
            " closed, protocol).",
            ["engine", "kind"],
            registry=registry,
        )
        self.ttft = Histogram(
            "pdroute_proxy_ttft_seconds",
            "Time from the request's arrival to its first token sent, by the path served.",
            ["path"],
            buckets=TTFT_BUCKETS_S,
            registry=registry,
        )
        self.tpot = Histogram(
            "pdroute_proxy_tpot_seconds",
            "Mean time per output token after the first, per request, by the path served.",
            ["path"],
            buckets=TPOT_BUCKETS_S,
            registry=registry,
        )
        self.e2e = Histogram(
            "pdroute_proxy_e2e_seconds",
            "Time from the request's arrival to its last token sent, by the path served.",
            ["path"],
            buckets=E2E_BUCKETS_S,
            registry=registry,
        )
        self.in_flight = Gauge(
            "pdroute_proxy_in_flight_requests", "Client requests being served now.", registry=registry
        )
        for admission in ADMISSIONS:
            self.admissions.labels(admission=admission)
        for cause in FALLBACK_CAUSES:
            self.fallbacks.labels(cause=cause)
        for path in PATHS:
            self.ttft.labels(path=path)
            self.tpot.labels(path=path)
            self.e2e.labels(path=path)
