"""Prometheus metrics of the engine scraper, on the service's injected registry.

Labels stay bounded: ``target`` is an endpoint id of the engines file, ``kind`` an engine kind,
``reason`` one of ``REASONS``, ``pool`` one of the three pool names.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.engines.autofill import FleetSnapshot
from app.engines.config import POOL_NAMES, PoolName

REASONS = ("timeout", "connect", "http_status", "too_large", "parse", "no_metrics", "bad_value", "other")
SCRAPE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ScrapeMetrics:
    """Scrape durations and errors, and how fresh each pool's data is."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "pdroute_engine_scrape_duration_seconds",
            "Time to fetch and parse one engine's /metrics, by engine kind (failures included).",
            ["kind"],
            buckets=SCRAPE_BUCKETS_S,
            registry=registry,
        )
        self.errors = Counter(
            "pdroute_engine_scrape_errors",
            "Engine scrapes that failed or returned refused values, by endpoint id, engine kind and"
            " reason (timeout, connect, http_status, too_large, parse, no_metrics, bad_value, other).",
            ["target", "kind", "reason"],
            registry=registry,
        )
        self.data_age = Gauge(
            "pdroute_engine_data_age_seconds",
            "Age of the freshest reading in each pool (+Inf when the pool has none).",
            ["pool"],
            registry=registry,
        )
        self.fresh_endpoints = Gauge(
            "pdroute_engine_fresh_endpoints",
            "Endpoints of each pool whose latest reading is within PDROUTE_ENGINES_STALE_S.",
            ["pool"],
            registry=registry,
        )
        self.configured_endpoints = Gauge(
            "pdroute_engine_configured_endpoints",
            "Endpoints of each pool in the engines file (0: the pool is not used).",
            ["pool"],
            registry=registry,
        )
        self.reloads = Counter(
            "pdroute_engines_reloads",
            "Engines file reloads by outcome (success, failure: the previous fleet stays).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("success", "failure"):
            self.reloads.labels(outcome=outcome)

    def watch(
        self, snapshot: Callable[[], FleetSnapshot], monotonic: Callable[[], float], stale_s: float
    ) -> None:
        """Compute the per-pool gauges from the current snapshot whenever /metrics is read."""

        def ages(pool: PoolName) -> list[float]:
            snap = snapshot()
            now = monotonic()
            readings = (snap.readings.get(i) for i in snap.fleet.pools.get(pool, ()))
            return [now - r.taken_at for r in readings if r is not None]

        def freshest(pool: PoolName) -> Callable[[], float]:
            return lambda: min(ages(pool), default=math.inf)

        def fresh_count(pool: PoolName) -> Callable[[], float]:
            return lambda: float(sum(1 for a in ages(pool) if a <= stale_s))

        def configured(pool: PoolName) -> Callable[[], float]:
            return lambda: float(len(snapshot().fleet.pools.get(pool, ())))

        for pool in POOL_NAMES:
            self.configured_endpoints.labels(pool=pool).set_function(configured(pool))
            self.data_age.labels(pool=pool).set_function(freshest(pool))
            self.fresh_endpoints.labels(pool=pool).set_function(fresh_count(pool))
