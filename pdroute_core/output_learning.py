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
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from pdroute_core.bounds import MAX_OUTPUT_LEN, MAX_PROMPT_LEN

NUM_BUCKETS = MAX_PROMPT_LEN.bit_length()  # buckets 0 .. floor(log2 MAX_PROMPT_LEN): 25


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

    def to_json(self) -> dict[str, float | int]:
        return {
            "min_prompt_len": self.min_prompt_len,
            "observations": self.observations,
            "mean_output_tokens": self.mean_output_tokens,
            "ratio": self.ratio,
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

    def to_json(self) -> list[dict[str, float | int]]:
        """The buckets as ``/params`` carries them."""
        return [b.to_json() for b in self.buckets]


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
                    )
                )
        sums = tuple(self._sums(k) for k in range(NUM_BUCKETS))
        return OutputLenSnapshot(self.config, tuple(buckets), sums)
