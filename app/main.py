"""The FastAPI application factory.

Run it with ``pdroute serve`` (or ``uvicorn --factory app.main:create_app_from_env``). Tests
build their own app with ``create_app(Settings(...), registry=CollectorRegistry())``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.engines.request_fill import RequestFiller
from app.engines.scraper import build_scraper
from app.grid_limit import GridLimit
from app.http.envelope import BodyEndpoint, RequestEnvelope
from app.http.errors import install_error_handlers
from app.learners.calibration import calibration_from_settings
from app.learners.output_length import output_learning_from_settings
from app.metrics.service import Metrics
from app.params_store import ParamsStore
from app.reload import install_sighup, remove_sighup, watch_params_file
from app.routes import admin, feedback, health, params, plan, route
from app.schemas.route import ErrorResponse
from app.settings import Settings

log = logging.getLogger("pdroute")


class PdrouteApp(FastAPI):
    """FastAPI behind the service's one middleware, which also answers the ``/route`` endpoints.

    Every request goes through ``stack``: ``app.http.envelope.RequestEnvelope`` (body size, the
    JSON 500, metrics) around FastAPI. ``POST /route`` and ``POST /route/batch`` are answered by
    the envelope itself from their body endpoints (FastAPI's router and dependency solving cost
    more than the decision). The paths are in FastAPI's router too, so other methods answer
    405, and ``openapi`` documents their bodies.
    """

    stack: ASGIApp | None = None
    endpoints: dict[str, BodyEndpoint]
    extra_openapi_paths: dict[str, Any]

    def serve_endpoints(self, endpoints: dict[str, BodyEndpoint], openapi_paths: dict[str, Any]) -> None:
        """Serve ``POST <path>`` with ``endpoints[path]`` (through the envelope), documented by
        ``openapi_paths``."""
        self.endpoints = endpoints
        self.extra_openapi_paths = openapi_paths
        for path in endpoints:
            self.router.routes.append(Route(path, _answered_by_envelope, methods=["POST"]))

    def use_envelope(self, wrap: Callable[[ASGIApp], ASGIApp]) -> None:
        """Put ``wrap(FastAPI)`` (the middleware around it) in front of everything."""
        self.stack = wrap(super().__call__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.stack is None:
            await super().__call__(scope, receive, send)
            return
        await self.stack(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            schema["paths"] = {**getattr(self, "extra_openapi_paths", {}), **schema["paths"]}
        return self.openapi_schema  # type: ignore[return-value]  # set by super().openapi()


async def _answered_by_envelope(scope: Scope, receive: Receive, send: Send) -> None:
    """The router's entry of a body endpoint: a POST there is answered by the envelope first."""
    raise RuntimeError(f"POST {scope['path']} reached the router: the envelope answers it")


def create_app(
    settings: Settings | None = None,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """Build the service. Loads and validates the params now: a bad file raises ``InvalidParams``
    (and a bad engines file ``InvalidEngines``). ``monotonic`` times engine readings."""
    settings = settings if settings is not None else Settings()
    registry = registry if registry is not None else CollectorRegistry()
    # The *_created series double the scrape size and no dashboard or alert here uses them.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client ships it unannotated
    store = ParamsStore(
        settings.resolved_params_path(),
        clock,
        settings.last_good_params_path,
        model_name=settings.decision_model,
        harm_weight=settings.harm_weight,
        slo_margin=settings.slo_margin,
        objective=settings.objective,
        first_token=settings.first_token,
    )
    metrics = Metrics(registry)
    metrics.set_params(store.current, clock)
    if store.last_error is not None:  # started on the last good copy: count the refusal
        metrics.reloads.labels(trigger="startup", outcome="failure").inc()

    scraper = build_scraper(settings, registry, monotonic)  # None unless PDROUTE_ENGINES_FILE is set
    filler = RequestFiller(scraper, monotonic, settings.engines_stale_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        has_sighup = install_sighup(store, metrics, clock)
        watcher = None
        if settings.watch_params:
            watcher = asyncio.create_task(watch_params_file(store, metrics, clock, settings.watch_interval_s))
        scraping = asyncio.create_task(scraper.run()) if scraper is not None else None
        log.info(
            "serving params %s (%s on %s, %s) from %s with the %s model; break-even load %.3g; reload on %s",
            store.current.params_id,
            store.current.params.metadata.model,
            store.current.params.metadata.hardware,
            store.current.params.metadata.transfer_path,
            store.path,
            store.current.model.name,
            store.current.params.break_even_load,
            ", ".join(
                t
                for t, on in (
                    ("SIGHUP", has_sighup),
                    ("file change", settings.watch_params),
                    ("POST /admin/reload", settings.admin_token is not None),
                )
                if on
            )
            or "nothing",
        )
        try:
            yield
        finally:
            for task in (watcher, scraping):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if has_sighup:
                remove_sighup()

    app = PdrouteApp(
        title="pdroute",
        version="0.1.0",
        summary="Collocated or disaggregated prefill/decode, per request, from a profiled cost model.",
        lifespan=lifespan,
        responses={
            413: {"model": ErrorResponse, "description": "the request body is over PDROUTE_MAX_BODY_BYTES"},
            422: {"model": ErrorResponse, "description": "invalid input; `error` names the field and why"},
            500: {"model": ErrorResponse, "description": "an unexpected error, logged with the request_id"},
        },
    )
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = metrics
    app.state.clock = clock
    app.state.registry = registry
    app.state.scraper = scraper
    app.state.grid_limit = GridLimit(
        settings.max_concurrent_grids, metrics.grids_rejected, metrics.grids_in_progress
    )
    calibration = calibration_from_settings(settings, clock)
    app.state.calibration = calibration
    served_calibration = calibration if settings.calibration_enabled else None
    output_learning = output_learning_from_settings(settings, clock)  # None when off
    app.state.output_learning = output_learning
    install_error_handlers(app)
    app.serve_endpoints(
        {
            "/route": route.RouteEndpoint(
                store,
                metrics,
                settings,
                batch=False,
                calibration=served_calibration,
                filler=filler,
                output_learning=output_learning,
            ),
            "/route/batch": route.RouteEndpoint(
                store,
                metrics,
                settings,
                batch=True,
                calibration=served_calibration,
                filler=filler,
                output_learning=output_learning,
            ),
        },
        route.openapi_paths(),
    )
    for module in (params, health, admin, feedback):
        app.include_router(module.router)
    app.include_router(plan.router)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # The one middleware around every request: body size, the JSON 500, timing and counting.
    app.use_envelope(
        lambda core: RequestEnvelope(core, metrics, settings.max_body_bytes, body_endpoints=app.endpoints)
    )
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` and worker processes: settings from ``PDROUTE_*``."""
    return create_app(Settings())
