"""The loaded parameters: one immutable snapshot, swapped atomically on reload.

A handler reads ``store.current`` once and uses that snapshot for the whole request, so a
request in flight sees either the old or the new params, never a mix. A reload validates the
whole file first (``solver.params.load_params``); a bad file raises and the old snapshot stays.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pdroute_core.errors import InvalidParams
from pdroute_core.params import CostModelParams
from pdroute_core.routing import AUTO, DecisionModel, build_model
from pdroute_core.routing.objective import DEFAULT_OBJECTIVE, Objective
from pdroute_core.routing.queue_aware import (
    DEFAULT_HARM_WEIGHT,
    DEFAULT_SLO_MARGIN,
    FIRST_TOKEN_DECODE,
    FirstToken,
)
from solver.params import load_params, save_params

log = logging.getLogger("pdroute.params")


@dataclass(frozen=True)
class LoadedParams:
    """What the service is serving: the params, the decision model built on them, where they
    came from, and when they were loaded."""

    params: CostModelParams
    model: DecisionModel  # the model that decides every request (``model.name``)
    params_id: str
    path: Path
    loaded_at: float  # unix seconds, from the injected clock

    @property
    def created_at_unix(self) -> float | None:
        """The params' own creation time (metadata.created_at), when it parses as ISO 8601.

        Without a UTC offset the time is taken as UTC (the metadata's convention), not as the
        server's local time.
        """
        try:
            created = datetime.fromisoformat(self.params.metadata.created_at)
            if created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            return created.timestamp()
        except (ValueError, OverflowError):
            return None


@dataclass(frozen=True)
class FileSignature:
    """What identifies one version of a file, through symlinks (ConfigMap volumes swap them).

    ``ctime_ns`` changes with the permissions too, so fixing an unreadable file is noticed.
    """

    realpath: str
    inode: int
    mtime_ns: int
    ctime_ns: int
    size: int

    @classmethod
    def of(cls, path: Path) -> FileSignature | None:
        try:
            st = os.stat(path)
            return cls(os.path.realpath(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except (OSError, ValueError):  # ValueError: a path with a NUL byte
            return None


class ParamsStore:
    """Holds the current ``LoadedParams``; ``reload`` validates then swaps.

    ``last_good_path`` (used with several worker processes): every successful load is copied
    there, and a process that starts while ``path`` is invalid starts on that copy instead of
    failing. uvicorn's supervisor restarts all workers on SIGHUP, so without it a bad file
    followed by a SIGHUP would take every worker down.
    """

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float],
        last_good_path: Path | None = None,
        *,
        model_name: str = AUTO,
        harm_weight: float = DEFAULT_HARM_WEIGHT,
        slo_margin: float = DEFAULT_SLO_MARGIN,
        objective: Objective = DEFAULT_OBJECTIVE,
        first_token: FirstToken = FIRST_TOKEN_DECODE,
    ) -> None:
        self.path = path
        self.model_name = model_name  # a name of pdroute_core.routing.registry, or "auto"
        self.harm_weight = harm_weight
        self.slo_margin = slo_margin
        self.objective = objective
        self.first_token = first_token
        self.last_good_path = last_good_path
        self._clock = clock
        self._lock = threading.Lock()  # serialises reloads; readers never take it
        self.last_error: str | None = None
        self.signature = FileSignature.of(path)
        try:
            self._current = self._load(path)
        except InvalidParams as exc:
            if last_good_path is None or not last_good_path.exists():
                raise
            self._current = self._load(last_good_path)
            self.last_error = str(exc)
            log.error("%s; serving the last good params %s instead", exc, self._current.params_id)

    def _load(self, path: Path) -> LoadedParams:
        params = load_params(path)
        try:
            # Params that lack the chosen model's forms are refused like any bad file.
            model = build_model(
                self.model_name,
                params,
                harm_weight=self.harm_weight,
                slo_margin=self.slo_margin,
                objective=self.objective,
                first_token=self.first_token,
            )
        except InvalidParams as exc:
            raise InvalidParams(f"{path}: {exc}") from None
        if self.last_good_path is not None and path != self.last_good_path:
            try:
                save_params(params, self.last_good_path)
            except OSError as exc:  # the params are valid: serve them, only the fallback copy is stale
                log.warning("could not keep a copy of the params in %s: %s", self.last_good_path, exc)
        return LoadedParams(params, model, params.params_id, self.path, self._clock())

    @property
    def current(self) -> LoadedParams:
        return self._current

    def reload(self) -> LoadedParams:
        """Load and validate the file, then swap; raise ``InvalidParams`` and keep the old."""
        with self._lock:
            signature = FileSignature.of(self.path)
            try:
                loaded = self._load(self.path)
            except InvalidParams as exc:
                self.last_error = str(exc)
                self.signature = signature  # do not retry the same bad version on every poll
                raise
            self._current = loaded
            self.signature = signature
            self.last_error = None
            return loaded

    def file_signature(self) -> FileSignature | None:
        """The signature of the file on disk now (None: it cannot be stat'ed)."""
        return FileSignature.of(self.path)
