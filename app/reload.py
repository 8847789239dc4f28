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
from typing import Any, Literal

from app.metrics.service import Metrics
from app.params_store import LoadedParams, ParamsStore
from pdroute_core.errors import InvalidParams

log = logging.getLogger("pdroute.reload")
Trigger = Literal["sighup", "admin", "watch"]
_NOTHING = object()


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
    """Reload for a trigger that has no caller to answer: nothing may escape, the old params stay."""
    try:
        reload_params(store, metrics, clock, trigger)
    except InvalidParams:
        pass  # already logged and counted by reload_params
    except Exception:
        log.exception(
            "params reload (%s) failed unexpectedly; still serving %s", trigger, store.current.params_id
        )


async def watch_params_file(
    store: ParamsStore, metrics: Metrics, clock: Callable[[], float], interval_s: float
) -> None:
    """Poll the params file and reload a new version once it has settled (runs until cancelled).

    A version is reloaded when two polls in a row see it: a file being written in place (a
    ``cp`` over it) is not refused half-written. A ConfigMap update (an atomic symlink swap)
    is loaded one poll after it lands.
    """
    settling: object = _NOTHING  # the new version seen at the last poll
    while True:
        await asyncio.sleep(interval_s)
        try:
            now = store.file_signature()  # None: the path is gone (also a version, refused)
            if now == store.signature:
                settling = _NOTHING
            elif now != settling:
                settling = now  # new, or still changing: look again at the next poll
            else:
                settling = _NOTHING
                _try_reload(store, metrics, clock, "watch")
        except Exception:  # the watch must outlive any surprise, or reloads would silently stop
            log.exception("params watch: unexpected error; still watching %s", store.path)


class _SighupHandler:
    """Reloads on SIGHUP, one reload for a burst of signals (a storm costs one reload, not N)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        store: ParamsStore,
        metrics: Metrics,
        clock: Callable[[], float],
    ) -> None:
        self.loop = loop
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.pending = False

    def __call__(self) -> None:
        if not self.pending:
            self.pending = True
            self.loop.call_soon(self._reload)

    def _reload(self) -> None:
        self.pending = False
        _try_reload(self.store, self.metrics, self.clock, "sighup")


# The SIGHUP disposition before install_sighup, restored by remove_sighup (pdroute serve ignores
# SIGHUP until the service is up, so that an early signal cannot kill it).
_previous_sighup: Any = None


def install_sighup(store: ParamsStore, metrics: Metrics, clock: Callable[[], float]) -> bool:
    """Reload on SIGHUP; returns False where signals cannot be handled (not the main thread)."""
    global _previous_sighup
    try:
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGHUP)
        loop.add_signal_handler(signal.SIGHUP, _SighupHandler(loop, store, metrics, clock))
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    _previous_sighup = previous
    return True


def remove_sighup() -> None:
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if _previous_sighup is not None:
            signal.signal(signal.SIGHUP, _previous_sighup)
