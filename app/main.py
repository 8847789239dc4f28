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

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)

from app.errors import install_error_handlers
from app.fastpath import PdrouteApp, RouteEndpoint
from app.grid_limit import GridLimit
from app.metrics import Metrics
from app.middleware import BodySizeLimitMiddleware, MetricsMiddleware
from app.params_store import ParamsStore
from app.reload import install_sighup, remove_sighup, watch_params_file
from app.routes import admin, health, params, plan, route
from app.schemas import ErrorResponse
from app.settings import Settings

log = logging.getLogger("pdroute")


def create_app(
    settings: Settings | None = None,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the service. Loads and validates the params now: a bad file raises ``InvalidParams``."""
    settings = settings if settings is not None else Settings()
    registry = registry if registry is not None else CollectorRegistry()
    # The *_created series double the scrape size and no dashboard or alert here uses them.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client ships it unannotated
    store = ParamsStore(settings.resolved_params_path(), clock, settings.last_good_params_path)
    metrics = Metrics(registry)
    metrics.set_params(store.current, clock)
    if store.last_error is not None:  # started on the last good copy: count the refusal
        metrics.reloads.labels(trigger="startup", outcome="failure").inc()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        has_sighup = install_sighup(store, metrics, clock)
        watcher = None
        if settings.watch_params:
            watcher = asyncio.create_task(watch_params_file(store, metrics, clock, settings.watch_interval_s))
        log.info(
            "serving params %s (%s on %s, %s) from %s; break-even load %.3g; reload on %s",
            store.current.params_id,
            store.current.params.metadata.model,
            store.current.params.metadata.hardware,
            store.current.params.metadata.transfer_path,
            store.path,
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
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
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
        },
    )
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = metrics
    app.state.clock = clock
    app.state.registry = registry
    app.state.grid_limit = GridLimit(
        settings.max_concurrent_grids, metrics.grids_rejected, metrics.grids_in_progress
    )
    install_error_handlers(app)
    route_handler = route.RouteHandler(store, metrics, settings)
    app.include_router(route.build_router(route_handler))
    for module in (params, health, admin):
        app.include_router(module.router)
    app.include_router(plan.router)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # add_middleware wraps: the last added is outermost. Timing around everything, then the
    # size limit before anything reads a body. The /route fast path gets the same two.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if settings.fast_route:
        endpoint = RouteEndpoint(route_handler)
        app.route_fast_path = MetricsMiddleware(
            BodySizeLimitMiddleware(endpoint, settings.max_body_bytes), metrics
        )
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` and worker processes: settings from ``PDROUTE_*``."""
    return create_app(Settings())
