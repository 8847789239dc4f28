"""``put_recent``: the bounded most-recent-first map of decisions by request id that feedback
matches against (``app.learners.calibration``, ``app.learners.output_length``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

V = TypeVar("V")


def put_recent(recent: OrderedDict[str, V], key: str, value: V, limit: int) -> None:
    """Store ``value`` as the newest entry of ``recent`` and drop the oldest beyond ``limit``.
    The caller holds whatever lock guards ``recent``."""
    recent[key] = value
    recent.move_to_end(key)
    while len(recent) > limit:
        recent.popitem(last=False)
