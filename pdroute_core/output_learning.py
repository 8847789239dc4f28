"""Online correction of the output-length prediction, per prompt bucket, from finished requests.

The queue-aware model prices a path's end-to-end latency as ``TTFT + (O - 1) * TPOT`` where
``O`` is the output length the gateway predicts (``predicted_output_len``, or the service's
default). The simulator showed that a gateway that only knows the fleet-wide mean output length
(211 tokens on the Azure conversation trace, where prompts over 3,000 tokens ask for 73) makes the
model mis-decide long prompts; a per-prompt-bucket mean fixes it (docs/simulation.md). This
module learns that correction online.

Buckets. A prompt of ``L`` tokens falls in bucket ``k = floor(log2 L)`` (``2**k <= L < 2**(k+1)``,
computed as ``L.bit_length() - 1``), as ``solver.sim.prediction.bucket_means``; prompts beyond
``MAX_PROMPT_LEN`` share its bucket, so there are at most ``NUM_BUCKETS`` (25).

Estimator. Per bucket, over the last ``window`` finished requests (each with the output length
it was told ``t_i`` and the one observed ``o_i``, in tokens), the correction ratio is the ratio
of sums::

    r = sum(o_i) / sum(t_i)

(the ratio estimator of ``o ~ r t``: the corrected told lengths of the window add up to the
observed ones). It is exactly 1 until the bucket holds
``min_observations`` requests, and clipped to ``[1 / max_ratio, max_ratio]``. A told length
``t`` is corrected to ``max(1, round(t * r))``, at most ``MAX_OUTPUT_LEN``; the product is
taken as ``t * sum(o) / sum(t)`` in integers and one division, so it is exact.

What it does with three kinds of predictions:

- exact predictions (``t_i = o_i``): ``sum(o) == sum(t)``, ``r`` is exactly 1.0 and every
  length is unchanged;
- a constant told length (the fleet-wide mean ``c``): ``t * r = c * sum(o) / (n c)`` is the
  bucket's mean observed output, so the correction returns the bucket mean;
- a per-request predictor biased per bucket (``o ~ b_k t``): ``r`` converges to ``b_k`` and
  the correction removes the bias.

``OutputLenLearner`` is mutable and not thread-safe (one owner feeds it); ``snapshot()`` gives
an immutable ``OutputLenSnapshot`` with the same ``corrected`` method, which a server swaps in
whole and reads on its hot path without locks.

Sharing. ``GET /params`` carries the snapshot (its config and, per bucket, ``BucketStats.to_json``
with the integer sums in force); ``OutputLenSnapshot.from_json`` rebuilds it, so a gateway
client's local tier corrects a told length exactly as the service does (the same integers, the
same one division).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pdroute_core.bounds import MAX_OUTPUT_LEN, MAX_PROMPT_LEN
from pdroute_core.errors import PdrouteError

NUM_BUCKETS = MAX_PROMPT_LEN.bit_length()  # buckets 0 .. floor(log2 MAX_PROMPT_LEN): 25


class InvalidOutputLearning(PdrouteError, ValueError):
    """An ``output_len_learning`` section that cannot be rebuilt into a snapshot (the message
    names the bad field). A ``ValueError`` too, as ``InvalidOutputTable``."""


@dataclass(frozen=True)
class OutputLearningConfig:
    """How the per-bucket correction is estimated (module docstring)."""

    window: int = 512  # finished requests kept per bucket (the most recent)
    min_observations: int = 50  # requests a bucket needs before its ratio leaves 1
    max_ratio: float = 8.0  # the ratio is clipped to [1 / max_ratio, max_ratio]

    def __post_init__(self) -> None:
        for name in ("window", "min_observations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.min_observations > self.window:
            raise ValueError(
                f"min_observations: expected at most window ({self.window}), got {self.min_observations!r}"
            )
        if (
            isinstance(self.max_ratio, bool)
            or not isinstance(self.max_ratio, int | float)
            or not (math.isfinite(self.max_ratio) and self.max_ratio >= 1)
        ):
            raise ValueError(f"max_ratio: expected a finite number >= 1, got {self.max_ratio!r}")


def bucket_of(prompt_len: int) -> int:
    """The bucket ``k`` of a prompt of ``prompt_len >= 1`` tokens: ``2**k <= prompt_len < 2**(k+1)``,
    capped at the last bucket."""
    return min(prompt_len.bit_length() - 1, NUM_BUCKETS - 1)


# A bucket's sums in force: (sum of observed tokens, sum of told tokens), or None while the
# bucket holds fewer than min_observations requests (the identity).
_Sums = tuple[int, int] | None


def _ratio(sums: _Sums, max_ratio: float) -> float:
    if sums is None:
        return 1.0
    return min(max(sums[0] / sums[1], 1.0 / max_ratio), max_ratio)


def _corrected(told_len: int, sums: _Sums, max_ratio: float) -> int:
    if sums is None:
        return told_len
    observed, told = sums
    if observed * max_ratio < told or observed > told * max_ratio:  # clipped
        value = told_len * _ratio(sums, max_ratio)
    else:
        value = told_len * observed / told  # integers, one division: exact
    return min(max(1, round(value)), MAX_OUTPUT_LEN)


@dataclass(frozen=True)
class BucketStats:
    """One bucket's state: prompts of at least ``min_prompt_len`` (``2**k``) tokens and under twice that."""

    min_prompt_len: int  # tokens
    observations: int  # finished requests in the window
    mean_output_tokens: float  # their mean observed output length (tokens)
    ratio: float  # the correction in force (1.0 until min_observations)
    # The sums in force over the window (tokens): observed output and told lengths; both None
    # while the bucket holds fewer than min_observations requests (the identity).
    observed_tokens: int | None = None
    told_tokens: int | None = None

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "min_prompt_len": self.min_prompt_len,
            "observations": self.observations,
            "mean_output_tokens": self.mean_output_tokens,
            "ratio": self.ratio,
            "observed_tokens": self.observed_tokens,
            "told_tokens": self.told_tokens,
        }


@dataclass(frozen=True)
class OutputLenSnapshot:
    """An immutable view of a learner: its non-empty buckets and the corrections in force.

    The default (no buckets) is the identity: ``corrected`` returns the told length.
    """

    config: OutputLearningConfig = field(default_factory=OutputLearningConfig)
    buckets: tuple[BucketStats, ...] = ()  # non-empty buckets, by min_prompt_len
    _sums: tuple[_Sums, ...] = field(default=(None,) * NUM_BUCKETS, repr=False, compare=False)

    def ratio(self, prompt_len: int) -> float:
        """The correction ratio in force for a prompt of ``prompt_len`` tokens (1.0: none)."""
        return _ratio(self._sums[bucket_of(prompt_len)], self.config.max_ratio)

    def corrected(self, prompt_len: int, told_len: int) -> int:
        """The output length (tokens) to assume for a request told ``told_len`` tokens."""
        return _corrected(told_len, self._sums[bucket_of(prompt_len)], self.config.max_ratio)

    def to_json(self) -> list[dict[str, float | int | None]]:
        """The buckets as ``/params`` carries them."""
        return [b.to_json() for b in self.buckets]

    @classmethod
    def from_json(cls, section: Any, where: str = "output_len_learning") -> OutputLenSnapshot:
        """The snapshot a ``/params`` ``output_len_learning`` section of a correcting service
        states (``window``, ``min_observations``, ``max_ratio`` and ``buckets``; other keys are
        ignored). Raise ``InvalidOutputLearning`` naming ``where`` and the bad field otherwise.

        A bucket's sums must be present exactly when it holds ``min_observations`` requests, and
        its ``ratio`` and ``mean_output_tokens`` must be the ones its sums give.
        """
        if not isinstance(section, dict):
            raise InvalidOutputLearning(f"{where}: expected an object")
        values: dict[str, Any] = {k: section.get(k) for k in ("window", "min_observations", "max_ratio")}
        try:
            config = OutputLearningConfig(**values)
        except ValueError as exc:
            raise InvalidOutputLearning(f"{where}.{exc}") from None
        raw = section.get("buckets")
        if not isinstance(raw, list):
            raise InvalidOutputLearning(f"{where}.buckets: expected a list")
        buckets: list[BucketStats] = []
        sums: list[_Sums] = [None] * NUM_BUCKETS
        for i, item in enumerate(raw):
            at = f"{where}.buckets[{i}]"
            bucket, bucket_sums = _bucket_from_json(item, config, at)
            if buckets and bucket.min_prompt_len <= buckets[-1].min_prompt_len:
                raise InvalidOutputLearning(f"{at}.min_prompt_len: buckets must be sorted and distinct")
            buckets.append(bucket)
            sums[bucket_of(bucket.min_prompt_len)] = bucket_sums
        return cls(config, tuple(buckets), tuple(sums))


_BUCKET_LOWS = frozenset(2**k for k in range(NUM_BUCKETS))  # each bucket's min_prompt_len


def _count(item: dict[str, Any], name: str, at: str, upper: int | None = None) -> int:
    value = item.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (upper and value > upper):
        bound = f"in [1, {upper}]" if upper else ">= 1"
        raise InvalidOutputLearning(f"{at}.{name}: expected an integer {bound}, got {value!r}")
    return value


def _bucket_from_json(item: Any, config: OutputLearningConfig, at: str) -> tuple[BucketStats, _Sums]:
    """One bucket of ``BucketStats.to_json`` and its sums in force, checked against ``config``."""
    if not isinstance(item, dict):
        raise InvalidOutputLearning(f"{at}: expected an object")
    low: Any = item.get("min_prompt_len")
    if isinstance(low, bool) or not isinstance(low, int) or low not in _BUCKET_LOWS:
        raise InvalidOutputLearning(
            f"{at}.min_prompt_len: expected a power of two in [1, {2 ** (NUM_BUCKETS - 1)}], got {low!r}"
        )
    observations = _count(item, "observations", at, config.window)
    sums: _Sums = None
    if item.get("observed_tokens") is not None or item.get("told_tokens") is not None:
        sums = (_count(item, "observed_tokens", at), _count(item, "told_tokens", at))
    if (sums is not None) != (observations >= config.min_observations):
        state = "given" if sums is not None else "missing"
        raise InvalidOutputLearning(
            f"{at}: observed_tokens and told_tokens {state} with {observations} observations"
            f" (they are given from min_observations, {config.min_observations})"
        )
    for name in ("mean_output_tokens", "ratio"):
        value = item.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidOutputLearning(f"{at}.{name}: expected a finite number, got {value!r}")
    ratio = _ratio(sums, config.max_ratio)
    if item["ratio"] != ratio:
        raise InvalidOutputLearning(f"{at}.ratio: got {item['ratio']!r}, its sums give {ratio!r}")
    if sums is not None and item["mean_output_tokens"] != sums[0] / observations:
        raise InvalidOutputLearning(
            f"{at}.mean_output_tokens: observed_tokens / observations is {sums[0] / observations!r},"
            f" the section says {item['mean_output_tokens']!r}"
        )
    bucket = BucketStats(
        min_prompt_len=low,
        observations=observations,
        mean_output_tokens=float(item["mean_output_tokens"]),
        ratio=ratio,
        observed_tokens=None if sums is None else sums[0],
        told_tokens=None if sums is None else sums[1],
    )
    return bucket, sums


class OutputLenLearner:
    """Learns per prompt bucket how observed output lengths relate to told ones (module docstring).

    Mutable and not thread-safe: one owner calls ``observe``; readers use ``snapshot()``.
    """

    def __init__(self, config: OutputLearningConfig | None = None) -> None:
        self.config = config or OutputLearningConfig()
        window = self.config.window
        self._windows: list[deque[tuple[int, int]]] = [deque(maxlen=window) for _ in range(NUM_BUCKETS)]
        self._observed = [0] * NUM_BUCKETS  # sum of observed tokens in each window
        self._told = [0] * NUM_BUCKETS  # sum of told tokens in each window
        self.num_observations = 0  # accepted over the learner's life

    def observe(self, prompt_len: int, told_len: int, output_tokens: int) -> None:
        """Record one finished request (tokens); a non-positive value makes it ignored."""
        if prompt_len < 1 or told_len < 1 or output_tokens < 1:
            return
        k = bucket_of(prompt_len)
        window = self._windows[k]
        if len(window) == window.maxlen:
            old_told, old_observed = window[0]
            self._told[k] -= old_told
            self._observed[k] -= old_observed
        window.append((told_len, output_tokens))
        self._told[k] += told_len
        self._observed[k] += output_tokens
        self.num_observations += 1

    def _sums(self, k: int) -> _Sums:
        if len(self._windows[k]) < self.config.min_observations:
            return None
        return (self._observed[k], self._told[k])

    def ratio(self, prompt_len: int) -> float:
        """The correction ratio in force for a prompt of ``prompt_len`` tokens (1.0: none)."""
        return _ratio(self._sums(bucket_of(prompt_len)), self.config.max_ratio)

    def corrected(self, prompt_len: int, told_len: int) -> int:
        """The output length (tokens) to assume for a request told ``told_len`` tokens."""
        return _corrected(told_len, self._sums(bucket_of(prompt_len)), self.config.max_ratio)

    def snapshot(self) -> OutputLenSnapshot:
        """An immutable copy of the corrections in force and the buckets' statistics."""
        buckets = []
        for k, window in enumerate(self._windows):
            if window:
                buckets.append(
                    BucketStats(
                        min_prompt_len=2**k,
                        observations=len(window),
                        mean_output_tokens=self._observed[k] / len(window),
                        ratio=_ratio(self._sums(k), self.config.max_ratio),
                        observed_tokens=None if (in_force := self._sums(k)) is None else in_force[0],
                        told_tokens=None if in_force is None else in_force[1],
                    )
                )
        sums = tuple(self._sums(k) for k in range(NUM_BUCKETS))
        return OutputLenSnapshot(self.config, tuple(buckets), sums)
