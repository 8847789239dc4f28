"""Atomic JSON writes: the one way every pdroute file (params, profiles, reports) is written.

A temp file beside the target, then ``os.replace``: a reader (the service's file watcher, a
ConfigMap publisher) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = 2) -> Path:
    """Write ``data`` as JSON (with a final newline) to ``path`` atomically; return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(data, indent=indent) + "\n")
    os.replace(tmp, p)
    return p
