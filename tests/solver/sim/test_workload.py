"""Workloads: validation, rate scaling and the Poisson generator."""

from __future__ import annotations

import numpy as np
import pytest

from solver.errors import InvalidTrace
from solver.sim import LengthDistribution, Workload, parse_length_spec, poisson_workload
from solver.sim.workload import MAX_TOKENS_PER_REQUEST


def test_at_rate_scales_gaps_and_keeps_requests() -> None:
    wl = Workload(np.array([0.0, 1.0, 3.0, 4.0]), np.array([1, 2, 3, 4]), np.array([4, 3, 2, 1]))
    assert wl.mean_rate == pytest.approx(0.75)
    fast = wl.at_rate(3.0)
    assert fast.mean_rate == pytest.approx(3.0)
    assert fast.arrival_s.tolist() == pytest.approx([0.0, 0.25, 0.75, 1.0])
    assert np.array_equal(fast.prompt_len, wl.prompt_len)
    assert wl.scaled(2.0).arrival_s.tolist() == [0.0, 0.5, 1.5, 2.0]
    assert wl.head(2).num_requests == 2


def test_poisson_rate_lengths_and_determinism() -> None:
    lengths = parse_length_spec("lognormal:1000,200,0.8")
    a = poisson_workload(20_000, 5.0, lengths, seed=1)
    b = poisson_workload(20_000, 5.0, lengths, seed=1)
    c = poisson_workload(20_000, 5.0, lengths, seed=2)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_len, b.prompt_len)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert a.mean_rate == pytest.approx(5.0, rel=0.03)
    assert np.mean(a.prompt_len) == pytest.approx(1000, rel=0.03)
    assert np.mean(a.output_len) == pytest.approx(200, rel=0.03)
    # Exponential gaps: the coefficient of variation is 1.
    gaps = np.diff(a.arrival_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.05)


def test_other_length_distributions() -> None:
    rng = np.random.default_rng(0)
    p, o = parse_length_spec("fixed:300,20").sample(rng, 5)
    assert p.tolist() == [300] * 5 and o.tolist() == [20] * 5
    p, o = parse_length_spec("uniform:10-20,1-3").sample(rng, 2000)
    assert (p.min(), p.max(), o.min(), o.max()) == (10, 20, 1, 3)
    pairs = ((5, 1), (7, 2))
    p, o = LengthDistribution("empirical", pairs=pairs).sample(rng, 500)
    assert set(zip(p.tolist(), o.tolist(), strict=True)) == set(pairs)


@pytest.mark.parametrize(
    "spec",
    [
        "fixed:1",
        "gamma:1,2",
        "uniform:5-1,1-2",
        "lognormal:a,b",
        "fixed:0,5",
        "",
        "fixed:20000000,5",  # beyond MAX_TOKENS_PER_REQUEST
        "uniform:1-99999999999999999999,1-5",  # beyond int64 too
        "lognormal:100,1e12",
    ],
)
def test_bad_length_specs(spec: str) -> None:
    with pytest.raises(InvalidTrace):
        parse_length_spec(spec)


def test_invalid_workloads() -> None:
    with pytest.raises(InvalidTrace, match="at least one"):
        Workload(np.array([]), np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    with pytest.raises(InvalidTrace, match="non-decreasing"):
        Workload(np.array([1.0, 0.0]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(InvalidTrace, match=">= 1 token"):
        Workload(np.array([0.0]), np.array([0]), np.array([1]))
    one = Workload(np.array([0.0]), np.array([3]), np.array([1]))
    assert one.mean_rate is None
    with pytest.raises(InvalidTrace, match="no rate"):
        one.at_rate(2.0)
    with pytest.raises(InvalidTrace, match="rate must be > 0"):
        poisson_workload(10, 0.0, LengthDistribution())
    with pytest.raises(InvalidTrace, match="seed must be an integer >= 0, got -1"):
        poisson_workload(10, 1.0, LengthDistribution(), seed=-1)
    with pytest.raises(InvalidTrace, match="<= 10,000,000 tokens"):
        Workload(np.array([0.0]), np.array([3]), np.array([MAX_TOKENS_PER_REQUEST + 1]))


def test_lognormal_tail_draws_are_clipped_to_the_cap() -> None:
    # Mean 1e6 tokens with sigma 3: about 1 % of draws exceed the 1e7 cap; they land on it.
    p, o = parse_length_spec("lognormal:1000000,100,3").sample(np.random.default_rng(0), 2000)
    assert p.max() == MAX_TOKENS_PER_REQUEST and 0 < np.count_nonzero(p == MAX_TOKENS_PER_REQUEST) < 100
    assert p.min() >= 1 and o.min() >= 1 and o.max() < MAX_TOKENS_PER_REQUEST
    assert Workload(np.zeros(2000), p, o).num_requests == 2000
