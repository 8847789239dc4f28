"""Request arrivals: a ``Workload`` (arrival times and lengths), rate scaling, and a generator.

A workload is replayed at other loads by scaling its time axis: ``at_rate(r)`` divides every
inter-arrival gap by the same factor so the mean rate becomes ``r`` requests/s while the
order and lengths of the requests stay the same. The Poisson generator draws unit-rate
exponential gaps once per seed, so every rate of a sweep sees the same requests (common random
numbers), which keeps policy comparisons at different loads paired.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidTrace
from solver.sim.block_hashes import BlockHashes
from solver.sim.turn_links import TurnLinks

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical")
# Longest prompt or output one request may ask for (tokens): ten times the longest context
# window of current models. A larger figure is a typo or a corrupt trace, and simulating it
# would run for hours (every output token is an engine step).
MAX_TOKENS_PER_REQUEST = 10_000_000


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival: times in seconds from the first arrival, lengths in tokens.

    ``blocks``: each request's KV block-hash chain (``solver.sim.block_hashes``), what lets a
    prefix cache find its reused prefix; None (the default): no content identity, no reuse.
    ``links``: follow-up requests that arrive a think time after their previous turn finishes
    (``solver.sim.turn_links``); None (the default): every request arrives at ``arrival_s``.
    """

    arrival_s: FloatArray  # non-decreasing, starts at 0.0
    prompt_len: IntArray  # >= 1
    output_len: IntArray  # >= 1 (the first token comes from the prefill)
    source: str = "unknown"  # where the requests come from (file name or generator spec)
    blocks: BlockHashes | None = None  # per-request block hashes (prompt, then output); None: none
    links: TurnLinks | None = None  # closed-loop follow-ups; None: open loop (arrival_s for all)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0:
            raise InvalidTrace("a workload needs at least one request")
        if len(self.prompt_len) != n or len(self.output_len) != n:
            raise InvalidTrace("arrival_s, prompt_len and output_len differ in length")
        if not np.all(np.isfinite(self.arrival_s)) or np.any(np.diff(self.arrival_s) < 0):
            raise InvalidTrace("arrival times must be finite and non-decreasing")
        if np.any(self.prompt_len < 1) or np.any(self.output_len < 1):
            raise InvalidTrace("prompt and output lengths must be >= 1 token")
        if np.any(self.prompt_len > MAX_TOKENS_PER_REQUEST) or np.any(
            self.output_len > MAX_TOKENS_PER_REQUEST
        ):
            raise InvalidTrace(f"prompt and output lengths must be <= {MAX_TOKENS_PER_REQUEST:,} tokens")
        blocks = self.blocks
        if blocks is not None:
            if blocks.num_requests != n:
                raise InvalidTrace(f"blocks: {blocks.num_requests} chains for {n} requests")
            full = (self.prompt_len + self.output_len) // blocks.block_size
            if np.any(blocks.num_blocks > full):
                raise InvalidTrace("blocks: a chain is longer than its request's full blocks")
        if self.links is not None and len(self.links.follow_up) and self.links.follow_up.max() >= n:
            raise InvalidTrace("links: a follow-up beyond the workload's requests")

    @property
    def num_requests(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival (s)."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def mean_rate(self) -> float | None:
        """Mean arrival rate, ``(n - 1) / duration`` requests/s; None without a time span."""
        if self.num_requests < 2 or self.duration_s <= 0:
            return None
        return (self.num_requests - 1) / self.duration_s

    def at_rate(self, rate: float) -> Workload:
        """The same requests with the time axis scaled so the mean rate is ``rate`` req/s."""
        native = self.mean_rate
        if native is None:
            raise InvalidTrace("a workload with one request (or one instant) has no rate to scale")
        if not rate > 0:
            raise InvalidTrace(f"rate must be > 0 requests/s, got {rate!r}")
        return self.scaled(rate / native)

    def scaled(self, factor: float) -> Workload:
        """Replay ``factor`` times faster (factor 2 halves every gap, doubling the load)."""
        if not factor > 0 or not np.isfinite(factor):
            raise InvalidTrace(f"scale factor must be a finite number > 0, got {factor!r}")
        return Workload(
            arrival_s=self.arrival_s / factor,
            prompt_len=self.prompt_len,
            output_len=self.output_len,
            source=f"{self.source} x{factor:g}",
            blocks=self.blocks,
            links=self.links,
        )

    def head(self, num_requests: int) -> Workload:
        """The first ``num_requests`` requests."""
        if num_requests < 1:
            raise InvalidTrace(f"num_requests must be >= 1, got {num_requests}")
        return Workload(
            self.arrival_s[:num_requests],
            self.prompt_len[:num_requests],
            self.output_len[:num_requests],
            self.source,
            None if self.blocks is None else self.blocks.head(num_requests),
            None if self.links is None else self.links.head(num_requests),
        )


@dataclass(frozen=True)
class LengthDistribution:
    """Prompt and output lengths of generated requests (tokens).

    ``fixed``: every request is (prompt_mean, output_mean). ``uniform``: integers in
    [prompt_min, prompt_max] and [output_min, output_max]. ``lognormal``: log-normal with the
    given means and log-space ``sigma``; draws beyond ``MAX_TOKENS_PER_REQUEST`` are clipped
    to it. ``empirical``: resample (prompt, output) pairs jointly from ``pairs``, e.g. the
    lengths of a trace.
    """

    kind: str = "lognormal"
    prompt_mean: float = 1024.0
    output_mean: float = 128.0
    prompt_min: int = 1
    prompt_max: int = 4096
    output_min: int = 1
    output_max: int = 1024
    sigma: float = 1.0
    pairs: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise InvalidTrace(f"length distribution: unknown kind {self.kind!r} (one of {LENGTH_KINDS})")
        if self.kind == "empirical" and not self.pairs:
            raise InvalidTrace("length distribution: empirical needs at least one (prompt, output) pair")
        if self.kind in ("fixed", "lognormal") and not (self.prompt_mean >= 1 and self.output_mean >= 1):
            raise InvalidTrace("length distribution: means must be >= 1 token")
        if self.kind == "uniform" and not (
            1 <= self.prompt_min <= self.prompt_max and 1 <= self.output_min <= self.output_max
        ):
            raise InvalidTrace("length distribution: uniform needs 1 <= min <= max for both lengths")
        if not self.sigma > 0:
            raise InvalidTrace("length distribution: sigma must be > 0")
        largest = max(self.prompt_mean, self.output_mean, self.prompt_max, self.output_max)
        if self.kind != "empirical" and not largest <= MAX_TOKENS_PER_REQUEST:
            raise InvalidTrace(f"length distribution: lengths must be <= {MAX_TOKENS_PER_REQUEST:,} tokens")

    def sample(self, rng: np.random.Generator, n: int) -> tuple[IntArray, IntArray]:
        """``n`` (prompt, output) lengths, each >= 1."""
        if self.kind == "fixed":
            p = np.full(n, round(self.prompt_mean), dtype=np.int64)
            o = np.full(n, round(self.output_mean), dtype=np.int64)
        elif self.kind == "uniform":
            p = rng.integers(self.prompt_min, self.prompt_max + 1, size=n, dtype=np.int64)
            o = rng.integers(self.output_min, self.output_max + 1, size=n, dtype=np.int64)
        elif self.kind == "lognormal":
            # mean of a log-normal is exp(mu + sigma^2/2): solve mu for the requested mean.
            shift = self.sigma**2 / 2
            p_draw = rng.lognormal(np.log(self.prompt_mean) - shift, self.sigma, n)
            o_draw = rng.lognormal(np.log(self.output_mean) - shift, self.sigma, n)
            # Clip before the integer cast: a long tail can reach past the cap (and int64).
            p = np.rint(np.minimum(p_draw, MAX_TOKENS_PER_REQUEST)).astype(np.int64)
            o = np.rint(np.minimum(o_draw, MAX_TOKENS_PER_REQUEST)).astype(np.int64)
        else:
            table = np.asarray(self.pairs, dtype=np.int64)
            idx = rng.integers(0, len(table), size=n)
            p, o = table[idx, 0].copy(), table[idx, 1].copy()
        return np.maximum(p, 1), np.maximum(o, 1)


def parse_length_spec(spec: str) -> LengthDistribution:
    """``fixed:P,O`` | ``uniform:PMIN-PMAX,OMIN-OMAX`` | ``lognormal:PMEAN,OMEAN[,SIGMA]``."""
    kind, _, rest = spec.partition(":")
    parts = [s.strip() for s in rest.split(",")] if rest else []
    try:
        if kind == "fixed" and len(parts) == 2:
            return LengthDistribution("fixed", prompt_mean=int(parts[0]), output_mean=int(parts[1]))
        if kind == "uniform" and len(parts) == 2:
            (pmin, pmax), (omin, omax) = (tuple(int(v) for v in s.split("-")) for s in parts)
            return LengthDistribution(
                "uniform", prompt_min=pmin, prompt_max=pmax, output_min=omin, output_max=omax
            )
        if kind == "lognormal" and len(parts) in (2, 3):
            sigma = float(parts[2]) if len(parts) == 3 else 1.0
            return LengthDistribution(
                "lognormal", prompt_mean=float(parts[0]), output_mean=float(parts[1]), sigma=sigma
            )
    except ValueError:
        pass
    raise InvalidTrace(
        f"length spec {spec!r}: expected fixed:P,O or uniform:PMIN-PMAX,OMIN-OMAX or "
        "lognormal:PMEAN,OMEAN[,SIGMA] (tokens)"
    )


def poisson_workload(num_requests: int, rate: float, lengths: LengthDistribution, seed: int = 0) -> Workload:
    """``num_requests`` Poisson arrivals at ``rate`` req/s, lengths from ``lengths``.

    The first request arrives at 0; gaps are exponential with mean ``1 / rate``. The same seed
    gives the same requests, and scaling with ``at_rate`` keeps the draws (see module doc).
    """
    if num_requests < 1:
        raise InvalidTrace(f"num_requests must be >= 1, got {num_requests}")
    if not rate > 0:
        raise InvalidTrace(f"rate must be > 0 requests/s, got {rate!r}")
    if seed < 0:
        raise InvalidTrace(f"seed must be an integer >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, size=num_requests - 1) / rate
    arrival = np.concatenate(([0.0], np.cumsum(gaps)))
    prompt, output = lengths.sample(rng, num_requests)
    return Workload(arrival, prompt, output, source=f"poisson({rate:g}/s, {lengths.kind}, seed={seed})")
