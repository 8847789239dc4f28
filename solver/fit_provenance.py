"""What the fit needs to know about a profile besides its numbers: whether its tables are sound,
a content hash, and the model and hardware names it carries.

Both profile sources (the torch profiler and the aiconfigurator database) fill
``ProfileResult.model_config``, ``device`` and ``provenance`` a little differently; the name
lookups below try the keys either uses, in a fixed order, and fall back to ``"unknown"``.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from typing import Any

from solver.errors import InvalidProfile
from solver.profile_result import ProfileResult


def check_table(name: str, table: Mapping[Any, float], key_len: int, *, allow_negative: bool) -> None:
    """Refuse a table the JSON loader would have refused: empty, bad keys, non-finite or signs.

    A ``ProfileResult`` built in code never went through ``profile_from_json_dict``, so the fit
    checks again rather than fitting NaN.
    """
    if not isinstance(table, Mapping) or not table:
        raise InvalidProfile(f"{name}: missing or empty")
    for key, value in table.items():
        parts = (key,) if key_len == 1 else key
        if (
            not isinstance(parts, tuple)
            or len(parts) != key_len
            or any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 for k in parts)
        ):
            raise InvalidProfile(f"{name}: key {key!r} is not {key_len} positive integer(s)")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise InvalidProfile(f"{name}[{key!r}]: expected a finite number, got {value!r}")
        if not allow_negative and value <= 0:
            raise InvalidProfile(f"{name}[{key!r}]: must be > 0 ms, got {value!r}")


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: tuples to lists, keys to strings, numpy scalars to Python numbers,
    non-finite floats and unknown objects to strings."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return f if math.isfinite(f) else str(f)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def profile_id(profile: ProfileResult) -> str:
    """A content hash of the profile's JSON form (12 hex digits of sha256)."""
    canonical = json.dumps(jsonable(profile.to_json_dict()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def first_str(*candidates: Any) -> str | None:
    """The first candidate that is a non-blank string, stripped."""
    for c in candidates:
        if isinstance(c, str) and c.strip():
            return c.strip()
    return None


def model_name(profile: ProfileResult) -> str:
    """The model's name from the provenance or the model config, else ``"unknown"``."""
    cfg, prov = profile.model_config, profile.provenance
    found = first_str(
        prov.get("model"),
        cfg.get("name"),
        cfg.get("model"),
        cfg.get("preset"),
        cfg.get("_name_or_path"),
    )
    return found or "unknown"


def hardware_name(profile: ProfileResult) -> str:
    """The hardware's name from the provenance or the device names, else ``"unknown"``.

    With several distinct device names and none of the known keys, the result is ``unknown``
    rather than an arbitrary pick.
    """
    dev, prov = profile.device, profile.provenance
    found = first_str(
        prov.get("hardware"),
        dev.get("system"),
        dev.get("name"),
        dev.get("src_name"),
        dev.get("src"),
        dev.get("gpu"),
    )
    if found is None:
        names = sorted({v.strip() for v in dev.values() if isinstance(v, str) and v.strip()})
        found = names[0] if len(names) == 1 else None
    return found or "unknown"
