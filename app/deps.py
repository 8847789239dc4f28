"""``Annotated`` dependency aliases: handlers receive the app's injected objects, never globals."""

# The providers are ``async def`` on purpose: FastAPI runs sync dependencies in a threadpool,
# which costs more than the whole /route decision.

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from app.grid_limit import GridLimit
from app.metrics.service import Metrics
from app.params_store import ParamsStore
from app.settings import Settings


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _store(request: Request) -> ParamsStore:
    store: ParamsStore = request.app.state.store
    return store


async def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def _clock(request: Request) -> Callable[[], float]:
    clock: Callable[[], float] = request.app.state.clock
    return clock


async def _grid_limit(request: Request) -> GridLimit:
    limit: GridLimit = request.app.state.grid_limit
    return limit


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[ParamsStore, Depends(_store)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
ClockDep = Annotated[Callable[[], float], Depends(_clock)]
GridLimitDep = Annotated[GridLimit, Depends(_grid_limit)]
