"""Reloading params without a restart: one function for every trigger, plus the triggers.

Triggers: SIGHUP, ``POST /admin/reload``, and a poll of the params file (a Kubernetes
ConfigMap update arrives as a symlink swap, which changes the file's resolved path and inode).
All go through ``reload_params``: validate the whole file, swap atomically, count, log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Literal

from app.metrics import Metrics
from app.params_store import LoadedParams, ParamsStore
from solver.errors import InvalidParams

log = logging.getLogger("pdroute.reload")
Trigger = Literal["sighup", "admin", "watch"]


def reload_params(
    store: ParamsStore, metrics: Metrics, clock: Callable[[], float], trigger: Trigger
) -> LoadedParams:
    """Reload ``store.path``; on failure log, count and re-raise ``InvalidParams`` (old stays)."""
    previous = store.current.params_id
    try:
        loaded = store.reload()
    except InvalidParams as exc:
        metrics.reloads.labels(trigger=trigger, outcome="failure").inc()
        log.error("params reload (%s) refused, still serving %s: %s", trigger, previous, exc)
        raise
    metrics.reloads.labels(trigger=trigger, outcome="success").inc()
    metrics.set_params(loaded, clock)
    log.info("params reload (%s): %s -> %s from %s", trigger, previous, loaded.params_id, loaded.path)
    return loaded


def _try_reload(store: ParamsStore, metrics: Metrics, clock: Callable[[], float], trigger: Trigger) -> None:
    # A refusal is already logged and counted by reload_params; the old params keep serving.
    with contextlib.suppress(InvalidParams):
        reload_params(store, metrics, clock, trigger)


async def watch_params_file(
    store: ParamsStore, metrics: Metrics, clock: Callable[[], float], interval_s: float
) -> None:
    """Poll the params file and reload when its version changes (runs until cancelled)."""
    while True:
        await asyncio.sleep(interval_s)
        if store.has_changed():
            _try_reload(store, metrics, clock, "watch")


def install_sighup(store: ParamsStore, metrics: Metrics, clock: Callable[[], float]) -> bool:
    """Reload on SIGHUP; returns False where signals cannot be handled (not the main thread)."""
    try:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, _try_reload, store, metrics, clock, "sighup")
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True


def remove_sighup() -> None:
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
