"""Reading and writing ``params.json``: the one loader that the service, the CLI, the publish job
and the simulator share, with the limits a long-running service needs (size, regular files only,
one-line errors). The format itself lives in ``pdroute_core.params``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pdroute_core.errors import InvalidParams
from pdroute_core.params import CostModelParams, parse_params
from solver.jsonfile import write_json_atomic

# A params file is a few kB; a ConfigMap holds at most 1 MiB. Anything larger is not a params
# file, and reading it whole would cost memory (and, in the service, event-loop time).
MAX_PARAMS_FILE_BYTES = 1_048_576


def read_params_bytes(path: str | os.PathLike[str]) -> bytes:
    """The raw bytes of a params file, read safely; every failure is one ``InvalidParams`` line.

    Safe for a service that re-reads the path while it runs: only a regular file is read (a
    FIFO or a device would block or never end; it is opened non-blocking and refused), and at
    most ``MAX_PARAMS_FILE_BYTES``.
    """
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not block; it is refused below.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InvalidParams(f"{p}: file not found") from None
    except OSError as exc:
        raise InvalidParams(f"{p}: cannot read ({exc.strerror})") from None
    except ValueError:  # a path with a NUL byte
        raise InvalidParams(f"{p!s:.80}: not a usable path") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InvalidParams(f"{p}: is a directory, not a params file")
        if not stat.S_ISREG(mode):
            raise InvalidParams(f"{p}: not a regular file")
        chunks = []
        size = 0
        while size <= MAX_PARAMS_FILE_BYTES:
            chunk = os.read(fd, MAX_PARAMS_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InvalidParams(f"{p}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if size > MAX_PARAMS_FILE_BYTES:
        raise InvalidParams(f"{p}: larger than {MAX_PARAMS_FILE_BYTES} bytes, not a params file")
    return b"".join(chunks)


def load_params_and_bytes(path: str | os.PathLike[str]) -> tuple[CostModelParams, bytes]:
    """``load_params`` and the bytes it validated (what the publish job writes, unchanged)."""
    raw = read_params_bytes(path)
    try:
        return parse_params(raw), raw
    except InvalidParams as exc:
        raise InvalidParams(f"{Path(path)}: {exc}") from None


def load_params(path: str | os.PathLike[str]) -> CostModelParams:
    """Read and validate ``params.json``: the one loader of the service, the CLI, the publish
    job and the simulator. Every failure is one ``InvalidParams`` line naming the file."""
    return load_params_and_bytes(path)[0]


def save_params(params: CostModelParams, path: str | os.PathLike[str]) -> Path:
    """Write ``params.json`` atomically (temp file then rename) and return its path."""
    return write_json_atomic(path, params.to_dict(), indent=2)
