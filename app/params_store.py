"""The loaded parameters: one immutable snapshot, swapped atomically on reload.

A handler reads ``store.current`` once and uses that snapshot for the whole request, so a
request in flight sees either the old or the new params, never a mix. A reload validates the
whole file first (``read_params_file``); a bad file raises and the old snapshot stays.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from solver.errors import InvalidParams
from solver.params import CostModelParams, parse_params, save_params
from solver.routing.design import AnalyticalCostModel

log = logging.getLogger("pdroute.params")

# A params file is a few kB; a ConfigMap holds at most 1 MiB. Anything larger is not a params
# file, and reading it whole would cost memory and event-loop time.
MAX_PARAMS_FILE_BYTES = 1_048_576


def read_params_file(path: Path) -> CostModelParams:
    """Read and validate a params file; every failure is one ``InvalidParams`` naming the file.

    What ``solver.params.load_params`` does, made safe for a service that re-reads the path
    while it runs: only a regular file is read (a FIFO or a device would block the event loop
    or never end), at most ``MAX_PARAMS_FILE_BYTES``, and a document that breaks the JSON
    parser itself (nesting too deep, an integer too large for a float) is refused like any
    other bad file instead of escaping as another exception.
    """
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not block; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InvalidParams(f"{path}: file not found") from None
    except OSError as exc:
        raise InvalidParams(f"{path}: cannot read ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InvalidParams(f"{path}: is a directory, not a params file")
        if not stat.S_ISREG(mode):
            raise InvalidParams(f"{path}: not a regular file")
        chunks = []
        size = 0
        while size <= MAX_PARAMS_FILE_BYTES:
            chunk = os.read(fd, MAX_PARAMS_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InvalidParams(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if size > MAX_PARAMS_FILE_BYTES:
        raise InvalidParams(f"{path}: larger than {MAX_PARAMS_FILE_BYTES} bytes, not a params file")
    try:
        return parse_params(b"".join(chunks))
    except InvalidParams as exc:
        raise InvalidParams(f"{path}: {exc}") from None
    except RecursionError:
        raise InvalidParams(f"{path}: not valid JSON: nested too deeply") from None
    except (OverflowError, ValueError) as exc:
        raise InvalidParams(f"{path}: invalid value: {exc}") from None


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
        params = read_params_file(path)
        if self.last_good_path is not None and path != self.last_good_path:
            try:
                save_params(params, self.last_good_path)
            except OSError as exc:  # the params are valid: serve them, only the fallback copy is stale
                log.warning("could not keep a copy of the params in %s: %s", self.last_good_path, exc)
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

    def file_signature(self) -> FileSignature | None:
        """The signature of the file on disk now (None: it cannot be stat'ed)."""
        return FileSignature.of(self.path)
