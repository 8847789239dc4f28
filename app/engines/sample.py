"""One engine's load as read from its Prometheus exposition text (pure: text in, values out).

``EngineSample`` holds the engine-neutral signals pdroute can feed the decision model; each
engine kind's module (``vllm``, ``sglang``, ``trtllm``, ``custom``) fills what its engine
publishes and leaves the rest ``None``: a signal an engine does not publish is never invented.
``Reader`` sums a metric's series (an engine with several schedulers, e.g. vLLM's data-parallel
``engine`` label, publishes one series each; the pod's load is their sum) and refuses values that
cannot be a count or a fraction (NaN, infinite, negative), noting why in ``problems``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# The signals a sample may carry; a custom endpoint names a metric for any of them.
SIGNALS = (
    "running",  # requests running (in the engine's batch): decodes, and prefills in progress
    "waiting",  # requests queued, not started
    "decode_incoming",  # requests admitted for decode whose KV is still arriving (disaggregated decode)
    "kv_used_tokens",  # KV-cache tokens in use
    "kv_usage_fraction",  # custom only: KV-cache usage 0..1, times kv_capacity_tokens gives kv_used_tokens
    "kv_capacity_tokens",  # custom only: KV-cache capacity in tokens
    "pending_prefill_tokens",  # prompt tokens admitted and not yet prefilled
    "queue_prompt_tokens",  # prompt tokens of the waiting requests
    "kv_transfer_gbps",  # measured KV transfer speed, GB/s (reported, not fed to the model)
    "prompt_tokens_total",  # counter: prompt tokens prefilled since the engine started (its rate is used)
)

Series = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value) per series


class ExpositionError(ValueError):
    """The text is not Prometheus exposition format."""


class NoMetrics(ValueError):
    """The text is exposition format but holds none of the metrics the engine kind reads."""


@functools.lru_cache(maxsize=256)
def _line_filter(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names))
    return re.compile(rf"^(?:# (?:HELP|TYPE) )?(?:{alternatives})(?:[{{ \t].*)?$", re.M)


def select_lines(text: str, names: frozenset[str]) -> str:
    """The lines of ``text`` about ``names`` (samples and their HELP/TYPE), the rest dropped.

    A pod's /metrics is mostly histograms pdroute does not read (~100 kB for vLLM); the pure
    Python parser then only sees the few gauges it needs.
    """
    return "\n".join(_line_filter(names).findall(text)) + "\n"


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One endpoint's signals at one scrape (counts, tokens; ``None``: not published or invalid)."""

    running: float | None = None
    waiting: float | None = None
    decode_incoming: float | None = None
    kv_used_tokens: float | None = None
    pending_prefill_tokens: float | None = None
    queue_prompt_tokens: float | None = None
    kv_transfer_gbps: float | None = None
    prompt_tokens_total: float | None = None  # a counter: its rate between readings is used
    problems: tuple[str, ...] = ()  # series refused (NaN, negative, ...), one line each


def parse_series(text: str, names: frozenset[str] | None = None) -> Series:
    """The samples of the exposition text by sample name (only ``names``' when given).

    ``ExpositionError`` if it is not exposition text; ``NoMetrics`` if none of ``names`` is there.
    """
    if names is not None:
        selected = select_lines(text, names)
        if not selected.strip():
            parse_series(text)  # garbage is a parse error, not merely "no metrics"
            raise NoMetrics(f"none of {sorted(names)[:4]}... published")
        text = selected
    series: Series = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                series.setdefault(s.name, []).append((s.labels, float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # the parser's errors on garbage
        raise ExpositionError(f"not Prometheus text: {exc}") from None
    return series


def _matches(labels: Mapping[str, str], want: Mapping[str, str] | None) -> bool:
    return want is None or all(labels.get(k) == v for k, v in want.items())


class Reader:
    """Reads summed gauges out of one parsed exposition, collecting the problems it meets."""

    def __init__(self, series: Series) -> None:
        self.series = series
        self.problems: list[str] = []

    def _valid(self, name: str, value: float) -> bool:
        if math.isfinite(value) and value >= 0:
            return True
        self.problems.append(f"{name} = {value}")
        return False

    def total(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The sum of ``name`` over its series (matching ``labels``); None when absent or invalid."""
        found = [v for lab, v in self.series.get(name, ()) if _matches(lab, labels)]
        if not found:
            return None
        if not all(self._valid(name, v) for v in found):
            return None
        return float(sum(found))

    def by_label(self, name: str, label: str) -> dict[str, float] | None:
        """``name`` summed per value of ``label`` (a missing label counts as ""); None if absent
        or any series is invalid."""
        rows = self.series.get(name)
        if not rows:
            return None
        out: dict[str, float] = {}
        for lab, v in rows:
            if not self._valid(name, v):
                return None
            key = lab.get(label, "")
            out[key] = out.get(key, 0.0) + v
        return out

    def setting(self, name: str) -> float | None:
        """A configuration value every series of ``name`` agrees on (> 0); None otherwise."""
        values = {v for _, v in self.series.get(name, ())}
        if len(values) != 1:
            if len(values) > 1:
                self.problems.append(f"{name} differs between series: {sorted(values)}")
            return None
        value = values.pop()
        return value if math.isfinite(value) and value > 0 else None

    def labels_of(self, name: str) -> list[dict[str, str]]:
        return [lab for lab, _ in self.series.get(name, ())]

    def sample(
        self,
        *,
        running: float | None = None,
        waiting: float | None = None,
        decode_incoming: float | None = None,
        kv_used_tokens: float | None = None,
        pending_prefill_tokens: float | None = None,
        queue_prompt_tokens: float | None = None,
        kv_transfer_gbps: float | None = None,
        prompt_tokens_total: float | None = None,
    ) -> EngineSample:
        """The sample of these values, with the problems met while reading them."""
        return EngineSample(
            running,
            waiting,
            decode_incoming,
            kv_used_tokens,
            pending_prefill_tokens,
            queue_prompt_tokens,
            kv_transfer_gbps,
            prompt_tokens_total,
            tuple(self.problems),
        )


def add(*values: float | None) -> float | None:
    """The sum of the values that are known; None when none is."""
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None


KindReader = Callable[[Reader], EngineSample]
