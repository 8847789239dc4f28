"""The service's online output-length correction (``PDROUTE_OUTPUT_LEN_LEARNING=correct``).

One ``OutputLearningState`` per process, built only when the mode is ``correct`` (off: ``/route``
checks one attribute and runs as before). ``/route`` and ``/route/batch`` correct each request's
``predicted_output_len`` (the sent value, or the default when omitted) with ``snapshot.corrected``
before deciding, and ``remember`` the told length by request id. ``POST /feedback`` items that
carry ``output_tokens`` feed the learner (``pdroute_core.output_learning.OutputLenLearner``):
matched by ``request_id`` to the remembered told length, or with the told length of the item's
``inputs``. The snapshot is an immutable ``OutputLenSnapshot`` swapped whole on the
calibration's schedule (every ``refresh_every`` feedbacks or ``refresh_seconds``), so ``/route``
reads it without a lock (docs/calibration.md, "Output-length learning").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

from app.learners.recent import put_recent
from app.settings import Settings
from pdroute_core.output_learning import OutputLearningConfig, OutputLenLearner, OutputLenSnapshot

Mode = Literal["off", "correct"]


class OutputLearningState:
    """The learner, its recent told lengths and the snapshot in force; mutable, one lock.

    ``snapshot`` is read without the lock (an attribute read of an immutable object).
    """

    def __init__(
        self,
        config: OutputLearningConfig,
        *,
        lru_size: int,
        refresh_every: int,
        refresh_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self.lru_size = lru_size
        self.refresh_every = refresh_every
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, tuple[int, int]] = OrderedDict()  # id -> (prompt_len, told)
        self.learner = OutputLenLearner(config)
        self.snapshot = OutputLenSnapshot(config)  # swapped whole, never edited
        self._since_refresh = 0
        self._refreshed_at = clock()
        self.num_unmatched = 0  # feedback with output_tokens that named no remembered request

    def remember(self, request_id: str, prompt_len: int, told_len: int) -> None:
        """Keep the told length of a decided request (tokens) for its feedback."""
        with self._lock:
            put_recent(self._recent, request_id, (prompt_len, told_len), self.lru_size)

    def feedback(
        self,
        output_tokens: int,
        *,
        request_id: str | None = None,
        prompt_len: int | None = None,
        told_len: int | None = None,
    ) -> bool:
        """Learn from one finished request: its remembered told length by ``request_id``, else
        the given ``prompt_len`` and ``told_len``. Whether it was learnt from."""
        with self._lock:
            entry = self._recent.pop(request_id, None) if request_id is not None else None
            if entry is None and request_id is None and prompt_len is not None and told_len is not None:
                entry = (prompt_len, told_len)
            if entry is None:
                self.num_unmatched += 1
                return False
            self.learner.observe(entry[0], entry[1], output_tokens)
            self._since_refresh += 1
            now = self._clock()
            if self._since_refresh >= self.refresh_every or now - self._refreshed_at >= self.refresh_seconds:
                self.snapshot = self.learner.snapshot()
                self._since_refresh = 0
                self._refreshed_at = now
            return True

    def summary(self) -> dict[str, object]:
        """What ``/params`` shows under ``output_len_learning`` (the snapshot in force)."""
        config = self.learner.config
        return {
            "mode": "correct",
            "window": config.window,
            "min_observations": config.min_observations,
            "max_ratio": config.max_ratio,
            "observations": self.learner.num_observations,
            "unmatched": self.num_unmatched,
            "buckets": self.snapshot.to_json(),
        }


OFF_SUMMARY: dict[str, object] = {"mode": "off", "buckets": []}


def output_learning_from_settings(
    settings: Settings, clock: Callable[[], float]
) -> OutputLearningState | None:
    """The state when ``PDROUTE_OUTPUT_LEN_LEARNING=correct``, else None (off)."""
    if settings.output_len_learning == "off":
        return None
    return OutputLearningState(
        OutputLearningConfig(
            window=settings.output_len_window,
            min_observations=settings.output_len_min_observations,
            max_ratio=settings.output_len_max_ratio,
        ),
        lru_size=settings.calibration_lru_size,
        refresh_every=settings.calibration_refresh_every,
        refresh_seconds=settings.calibration_refresh_seconds,
        clock=clock,
    )
