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
from datetime import datetime
from pathlib import Path

from solver.costmodel import AnalyticalCostModel
from solver.errors import InvalidParams
from solver.params import CostModelParams, load_params, save_params

log = logging.getLogger("pdroute.params")


@dataclass(frozen=True)
class LoadedParams:
    """What the service is serving: the model, where it came from, and when it was loaded."""

    model: AnalyticalCostModel
    params_id: str
    path: Path
    loaded_at: float  # unix seconds, from the injected clock

    @property
    def params(self) -> CostModelParams:
        return self.model.params

    @property
    def created_at_unix(self) -> float | None:
        """The params' own creation time (metadata.created_at), when it parses as ISO 8601."""
        try:
            return datetime.fromisoformat(self.params.metadata.created_at).timestamp()
        except ValueError:
            return None


@dataclass(frozen=True)
class FileSignature:
    """What identifies one version of a file, through symlinks (ConfigMap volumes swap them)."""

    realpath: str
    inode: int
    mtime_ns: int
    size: int

    @classmethod
    def of(cls, path: Path) -> FileSignature | None:
        try:
            st = os.stat(path)
            return cls(os.path.realpath(path), st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            return None


class ParamsStore:
    """Holds the current ``LoadedParams``; ``reload`` validates then swaps.

    ``last_good_path`` (used with several worker processes): every successful load is copied
    there, and a process that starts while ``path`` is invalid starts on that copy instead of
    failing. uvicorn's supervisor restarts all workers on SIGHUP, so without it a bad file
    followed by a SIGHUP would take every worker down.
    """

    def __init__(self, path: Path, clock: Callable[[], float], last_good_path: Path | None = None) -> None:
        self.path = path
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
        if self.last_good_path is not None and path != self.last_good_path:
            save_params(params, self.last_good_path)
        return LoadedParams(AnalyticalCostModel(params), params.params_id, self.path, self._clock())

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

    def has_changed(self) -> bool:
        """Whether the file on disk differs from the version last tried (loaded or refused)."""
        return FileSignature.of(self.path) != self.signature
