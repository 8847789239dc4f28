"""Writing profiles: ``.pt`` (``torch.save`` of the plain JSON dict) or ``.json``.

A ``.pt`` file holds only ``ProfileResult.to_json_dict()`` (lists, dicts, numbers, strings), so
``solver.profile_io.load_profile`` reads it back with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from profiling.errors import ProfilingError, first_line
from solver.profile_io import save_profile_json
from solver.profile_result import ProfileResult

SUFFIXES = (".pt", ".json")


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The path, if it ends in ``.pt`` or ``.json``; raise ``ProfilingError`` otherwise."""
    p = Path(path)
    if p.suffix not in SUFFIXES:
        raise ProfilingError(f"{p}: a profile is written as .pt or .json, not {p.suffix or 'no suffix'!r}")
    if p.is_dir():
        raise ProfilingError(f"{p}: is a directory")
    return p


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Create ``path``'s directory and a scratch file in it now, so that a profile is never
    measured for minutes only to fail when it is saved; raise ``ProfilingError`` if it cannot."""
    p = check_output_path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise ProfilingError(f"{p}: cannot write there ({exc.strerror or first_line(exc)})") from None
    return p


def save_profile(profile: ProfileResult, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` atomically (``.json``: JSON text; ``.pt``: ``torch.save``); return the path."""
    p = check_output_path(path)
    try:
        if p.suffix == ".json":
            return save_profile_json(profile, p)
        import torch  # only here: the JSON form (and the aiconfigurator source) needs no torch

        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        # A JSON round trip leaves only plain types (a str subclass would not load with weights_only).
        torch.save(json.loads(json.dumps(profile.to_json_dict())), tmp)
        os.replace(tmp, p)
    except (OSError, RuntimeError) as exc:  # torch.save reports a failed open as a RuntimeError
        raise ProfilingError(f"{p}: cannot write the profile ({first_line(exc)})") from None
    return p
