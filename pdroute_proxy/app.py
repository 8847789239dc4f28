"""The proxy's application factory.

``create_proxy_app(settings)`` builds everything from injected settings, registry, clocks and
(optionally) an upstream client (``pdroute_proxy.http1``): the params store (the service's loader, model and
reload), the engine scraper, the ledger, the decider, the relay and the learners. The lifespan
starts the scraper and the params watcher and owns the upstream client unless one was injected.
Run it with ``pdroute proxy`` (one process: the ledger is per process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, disable_created_metrics, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from app.engines.scraper import EngineScraper, build_scraper
from app.learners.calibration import calibration_from_settings
from app.learners.output_length import output_learning_from_settings
from app.metrics.service import Metrics
from app.params_store import ParamsStore
from app.reload import watch_params_file
from pdroute_core.errors import PdrouteError
from pdroute_core.routing.queue_aware import FIRST_TOKEN_PREFILL
from pdroute_proxy import api, responses
from pdroute_proxy.decision import Decider
from pdroute_proxy.http1 import EngineClient
from pdroute_proxy.ledger import RATE_WINDOW_S, Ledger
from pdroute_proxy.metrics import ProxyMetrics
from pdroute_proxy.observe import Observer
from pdroute_proxy.relay import Relay
from pdroute_proxy.settings import ProxySettings
from pdroute_proxy.tokenize import Tokenizer
from pdroute_proxy.upstream import UpstreamError, api_base, get_json, session, timeouts

log = logging.getLogger("pdroute.proxy")


class NoEnginesFile(PdrouteError):
    """The proxy needs the fleet: PDROUTE_ENGINES_FILE (or --engines) is not set."""


class ProxyApp(FastAPI):
    """FastAPI behind ``api.Completions``, which answers the completion endpoints itself."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None:
            await super().__call__(scope, receive, send)
            return
        await self.front(scope, receive, send)


def create_proxy_app(
    settings: ProxySettings,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    client: EngineClient | None = None,
) -> FastAPI:
    """The proxy app; raises ``InvalidParams``, ``InvalidEngines`` or ``NoEnginesFile`` now."""
    registry = registry if registry is not None else CollectorRegistry()
    disable_created_metrics()  # type: ignore[no-untyped-call]  # as the service: no *_created series
    store = ParamsStore(
        settings.resolved_params_path(),
        clock,
        model_name=settings.decision_model,
        harm_weight=settings.harm_weight,
        slo_margin=settings.slo_margin,
        objective=settings.objective,
        first_token=FIRST_TOKEN_PREFILL,  # the proxy streams the prefill engine's token first
    )
    service_metrics = Metrics(registry)  # the params and reload series, shared with the service
    service_metrics.set_params(store.current, clock)
    scraper: EngineScraper | None = build_scraper(settings, registry, monotonic)
    if scraper is None:
        raise NoEnginesFile("the proxy needs the fleet: set PDROUTE_ENGINES_FILE (pdroute proxy --engines)")
    metrics = ProxyMetrics(registry)
    ledger = Ledger(settings.down_s, monotonic, settings.arrival_window_s or RATE_WINDOW_S)
    calibration = calibration_from_settings(settings, clock) if settings.calibration_enabled else None
    output_learning = output_learning_from_settings(settings, clock)
    decider = Decider(settings, store, ledger, scraper, monotonic, calibration, output_learning)
    holder: dict[str, EngineClient] = {}

    def upstream_client() -> EngineClient:
        return holder["client"]

    relay = Relay(settings, lambda: scraper.fleet, decider, ledger, metrics, upstream_client, monotonic)
    short = timeouts(settings.read_timeout_s, settings.connect_timeout_s)
    tokenizer = Tokenizer(lambda: scraper.fleet, ledger, upstream_client, monotonic, short)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = client is None
        holder["client"] = client if client is not None else session()
        tasks = [asyncio.create_task(scraper.run())]
        if settings.watch_params:
            tasks.append(
                asyncio.create_task(
                    watch_params_file(store, service_metrics, clock, settings.watch_interval_s)
                )
            )
        log.info(
            "proxy: %d engines, policy %s (%s model on %s), kv connector %s",
            len(scraper.fleet.endpoints),
            settings.policy,
            store.current.model.name,
            store.current.params_id,
            settings.kv_connector,
        )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if owned:
                await holder["client"].close()

    app = ProxyApp(title="pdroute proxy", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.store = store
    app.state.ledger = ledger
    app.state.relay = relay
    app.state.tokenizer = tokenizer
    observer = app.state.observer = Observer(metrics, monotonic, calibration, output_learning)
    app.state.calibration = calibration
    app.state.output_learning = output_learning
    app.state.scraper = scraper
    responses.install(app)
    app.include_router(api.router)
    app.front = api.Completions(super(ProxyApp, app).__call__, relay, tokenizer, observer)

    @app.get("/v1/models")
    async def models() -> Response:
        for engine_id in ledger.by_load(relay.decode_ids(), monotonic()):
            url = f"{api_base(scraper.fleet.endpoints[engine_id].url)}/v1/models"
            try:
                return responses.json_response(await get_json(upstream_client(), url, short))
            except UpstreamError as exc:
                metrics.upstream_errors.labels(engine=engine_id, kind=exc.cause).inc()
        return responses.json_response(
            responses.error_body("no engine answered /v1/models", "no_engine", 503), 503
        )

    @app.get("/health")
    async def health() -> Response:
        now = monotonic()
        fleet_now = scraper.fleet
        engines = {
            engine_id: {
                "pool": e.pool,
                "is_down": ledger.is_down(engine_id, now),
                "in_flight": ledger.load(engine_id).in_flight,
            }
            for engine_id, e in fleet_now.endpoints.items()
        }
        return responses.json_response(
            {
                "status": "ok",
                "policy": settings.policy,
                "model": store.current.model.name,
                "params_id": store.current.params_id,
                "engines": engines,
            }
        )

    @app.get("/decisions")
    async def decisions() -> Response:
        """The latest requests' decisions, inputs with their sources, fallbacks (newest last)."""
        return responses.json_response({"decisions": list(app.state.observer.recent)})

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def create_proxy_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from ``PDROUTE_*``."""
    return create_proxy_app(ProxySettings())
