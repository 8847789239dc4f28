"""Reading and writing profile files: JSON always; ``.pt`` (``torch.save``) when torch is present.

A ``.pt`` profile holds the same plain dict as the JSON form and is read with
``torch.load(weights_only=True)``: no arbitrary object is ever unpickled.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from solver.errors import InvalidProfile
from solver.jsonfile import write_json_atomic
from solver.profile_result import ProfileResult, profile_from_json_dict


def _reject_constant(token: str) -> float:
    raise InvalidProfile(f"non-finite number {token} is not allowed")


def _read_pt(path: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise InvalidProfile(
            f"{path}: a .pt profile needs torch (pip install 'pdroute[profiling]'), or use its JSON form"
        ) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types (UnpicklingError, RuntimeError, EOFError)
        detail = _unpickler_detail(str(exc))
        if detail.startswith("Unsupported global"):
            raise InvalidProfile(
                f"{path}: refused: a .pt profile holds only plain data (dicts, lists, numbers, "
                f"strings), and this one holds objects, which are never unpickled ({detail})"
            ) from None
        raise InvalidProfile(
            f"{path}: not a readable torch profile ({type(exc).__name__}: {detail or 'no detail'})"
        ) from None


def _unpickler_detail(message: str) -> str:
    """The one informative sentence of torch.load's error, on one line (max 200 characters).

    With ``weights_only=True`` torch wraps the reason in paragraphs of advice (including
    "re-run with weights_only=False", which this reader must never suggest) and ANSI codes.
    """
    marker = "WeightsUnpickler error:"
    if marker in message:
        message = message.split(marker, 1)[1]
    message = re.sub(r"\x1b\[[0-9;]*m", "", message)
    first = next((part for part in message.split("\n\n") if part.strip()), "")
    sentence = " ".join(first.split()).split(". ", 1)[0].rstrip(".")
    return sentence[:200]


def load_profile(path: str | os.PathLike[str]) -> ProfileResult:
    """Load and validate a profile (JSON, or ``.pt``); raise ``InvalidProfile`` naming the file."""
    p = Path(path)
    if not p.exists():
        raise InvalidProfile(f"{p}: file not found")
    if p.is_dir():
        raise InvalidProfile(f"{p}: is a directory, not a profile file")
    if p.suffix == ".pt":
        data = _read_pt(p)
    else:
        try:
            data = json.loads(p.read_bytes(), parse_constant=_reject_constant)
        except InvalidProfile as exc:
            raise InvalidProfile(f"{p}: {exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidProfile(f"{p}: not valid JSON ({exc})") from None
        except OSError as exc:
            raise InvalidProfile(f"{p}: cannot read ({exc.strerror})") from None
    try:
        return profile_from_json_dict(data)
    except InvalidProfile as exc:
        raise InvalidProfile(f"{p}: {exc}") from None


def save_profile_json(profile: ProfileResult, path: str | os.PathLike[str]) -> Path:
    """Write the JSON form atomically and return its path."""
    return write_json_atomic(path, profile.to_json_dict(), indent=1)
