"""Step latencies read from the profile tables: grid values, interpolation, extension rules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import InvalidProfile
from solver.profile_result import ProfileResult
from solver.sim.latency import Piecewise, StepLatency
from tests.solver.sim import profiles as P


def test_grid_points_return_the_table_values_exactly(profile: ProfileResult, latency: StepLatency) -> None:
    for length, ms in profile.T_prefill.items():
        assert latency.prefill_ms(length) == ms
    for (kv, batch), ms in profile.T_decode.items():
        assert latency.decode_ms(kv, batch) == ms
    for (chunk, batch), ms in profile.T_interference.items():
        assert latency.interference_ms(chunk, batch) == ms


@pytest.mark.parametrize(("kv", "batch"), [(300.0, 2), (777.5, 6), (1500.0, 20), (2047.0, 31)])
def test_decode_is_bilinear_inside_the_grid(latency: StepLatency, kv: float, batch: int) -> None:
    # The synthetic table is bilinear in (kv, batch), so bilinear interpolation reproduces it.
    assert latency.decode_ms(kv, batch) == pytest.approx(P.decode_formula_ms(kv, batch), rel=1e-12)


def test_decode_between_grid_points_by_hand() -> None:
    # A 2x2 table, interpolated by hand: rows kv 100/200, columns batch 1/3.
    prof = P.make_profile()
    prof = dataclasses.replace(
        prof, T_decode={(100, 1): 10.0, (100, 3): 14.0, (200, 1): 20.0, (200, 3): 30.0}
    )
    lat = StepLatency(prof)
    # batch 2 is halfway: 12 at kv 100, 25 at kv 200; kv 150 is halfway between: 18.5.
    assert lat.decode_ms(150.0, 2) == pytest.approx(18.5)
    # Below the grid on both axes: clamped to the corner.
    assert lat.decode_ms(10.0, 1) == 10.0
    # Above the kv grid: the last segment extended (slope 0.1 ms/token at batch 1).
    assert lat.decode_ms(300.0, 1) == pytest.approx(30.0)
    # Above the batch grid: extended along batch (2 ms/seq at kv 100, 5 at kv 200).
    assert lat.decode_ms(100.0, 5) == pytest.approx(18.0)
    assert lat.decode_ms(200.0, 5) == pytest.approx(40.0)


def test_extension_beyond_the_grid_follows_the_last_segment(latency: StepLatency) -> None:
    assert latency.prefill_ms(8192) == pytest.approx(P.prefill_formula_ms(8192), rel=1e-12)
    assert latency.decode_ms(8000.0, 128) == pytest.approx(P.decode_formula_ms(8000, 128), rel=1e-12)
    assert latency.interference_ms(2048, 64) == pytest.approx(P.interference_formula_ms(2048, 64), rel=1e-12)


def test_below_the_grid_prefill_clamps_and_interference_goes_to_zero(latency: StepLatency) -> None:
    smallest = min(P.PROMPT_LENS)
    assert latency.prefill_ms(1) == P.prefill_formula_ms(smallest)
    assert latency.prefill_ms(0) == 0.0
    # Interference has an implicit (chunk 0 -> 0 ms) point: linear below the smallest chunk.
    c0 = min(P.CHUNKS)
    assert latency.interference_ms(c0 // 2, 4) == pytest.approx(P.interference_formula_ms(c0, 4) / 2)


def test_negative_interference_is_floored_and_a_falling_tail_is_not_extended() -> None:
    prof = dataclasses.replace(
        P.make_profile(),
        T_interference={(64, 4): -0.5, (128, 4): 2.0},
        T_prefill={64: 10.0, 128: 20.0, 256: 15.0},
    )
    lat = StepLatency(prof)
    assert lat.interference_ms(64, 4) == 0.0
    # The last prefill segment falls (noise); beyond the grid the value stays flat.
    assert lat.prefill_ms(1024) == 15.0


def test_missing_decode_cells_are_filled_along_the_batch_axis() -> None:
    prof = dataclasses.replace(P.make_profile(), T_decode={(100, 1): 10.0, (100, 4): 16.0, (200, 1): 20.0})
    lat = StepLatency(prof)
    # (200, 4) is missing (e.g. out of memory): its row has one point, so it is flat at 20.
    assert lat.decode_ms(200.0, 4) == 20.0
    assert lat.decode_ms(100.0, 2) == pytest.approx(12.0)


def test_the_pass_fixed_cost_is_the_intercept_of_the_compute_bound_line(latency: StepLatency) -> None:
    # The synthetic prefill is 4 ms + 0.05 ms/token: the line through its points >= 512 tokens.
    assert latency.pass_fixed_ms == pytest.approx(P.PREFILL_BASE_MS, rel=1e-12)
    # A linear prefill leaves no prefix excess: each chunk pass costs T_prefill(chunk).
    assert latency.prefix_attention_ms(1024, 256) == pytest.approx(0.0, abs=1e-12)
    assert latency.chunk_pass_ms(1024, 256) == pytest.approx(P.prefill_formula_ms(256), rel=1e-12)
    assert latency.prefix_attention_ms(0, 256) == 0.0


def test_a_chunk_over_a_prefix_pays_the_work_the_one_pass_prefill_measured() -> None:
    lat = StepLatency(P.make_convex_profile())
    # Two points lie at or above the largest chunk (1,024): the line through (1024, 26) and
    # (2048, 50) has slope 24/1024 and intercept 2 ms.
    assert lat.pass_fixed_ms == pytest.approx(2.0, rel=1e-12)
    # Tokens 512..1024: T(1024) - T(512) + 2 = 17 ms, 6 ms above T(512) = 11.
    assert lat.prefix_attention_ms(512, 512) == pytest.approx(6.0, rel=1e-12)
    assert lat.chunk_pass_ms(512, 512) == pytest.approx(17.0, rel=1e-12)
    # Tokens 1024..1536: T(1536) = 38 (the last segment), 38 - 26 + 2 - 11 = 3 ms.
    assert lat.prefix_attention_ms(1024, 512) == pytest.approx(3.0, rel=1e-12)
    # Tokens 256..512: 11 - 7 + 2 = 6 ms is below T(256) = 7: never cheaper than no prefix.
    assert lat.prefix_attention_ms(256, 256) == 0.0
    assert lat.is_extrapolated(2049) and not lat.is_extrapolated(2048)


def test_transfer_time_is_bytes_over_bandwidth(profile: ProfileResult, latency: StepLatency) -> None:
    expected = 1000 * profile.bytes_per_token / (profile.p2p_bandwidth_GBps * 1e9) * 1e3
    assert latency.transfer_ms(1000) == pytest.approx(expected, rel=1e-12)


def test_empty_tables_are_rejected() -> None:
    with pytest.raises(InvalidProfile, match="T_decode"):
        StepLatency(dataclasses.replace(P.make_profile(), T_decode={}))
    with pytest.raises(InvalidProfile, match="T_prefill"):
        StepLatency(dataclasses.replace(P.make_profile(), T_prefill={}))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-100, 5000, allow_nan=False), min_size=1, max_size=30),
    st.lists(st.integers(1, 4000), min_size=1, max_size=6, unique=True),
    st.data(),
)
def test_vectorised_piecewise_matches_scalar_bit_for_bit(
    xs: list[float], grid: list[int], data: st.DataObject
) -> None:
    grid = sorted(grid)
    ys = data.draw(st.lists(st.floats(0.1, 100), min_size=len(grid), max_size=len(grid)))
    fn = Piecewise(grid, ys)
    many = fn.many(np.asarray(xs, dtype=np.float64))
    assert many.tolist() == [fn(x) for x in xs]


# --- T_chunk_prefix: a chunk's pass over a cached prefix, measured -----------------------------

CP_PREFIXES = (512, 1024, 2048)
CP_CHUNKS = (128, 512)


def chunk_prefix_formula_ms(prefix: float, chunk: float) -> float:
    """A measured-looking table: the chunk alone plus 1.5e-5 ms per (prefix token x chunk token),
    bilinear in (prefix, chunk), so interpolation reproduces it exactly."""
    return P.prefill_formula_ms(chunk) + 1.5e-5 * prefix * chunk


def with_chunk_prefix(profile: ProfileResult) -> ProfileResult:
    table = {(p, c): chunk_prefix_formula_ms(p, c) for p in CP_PREFIXES for c in CP_CHUNKS}
    return dataclasses.replace(profile, T_chunk_prefix=table)


def test_the_chunk_prefix_table_gives_the_prefix_attention(profile: ProfileResult) -> None:
    lat = StepLatency(with_chunk_prefix(profile))
    assert lat.has_chunk_prefix
    for p in CP_PREFIXES:
        for c in CP_CHUNKS:  # at grid points: the table less the chunk alone (prefix 0 = T_prefill)
            assert lat.prefix_attention_ms(p, c) == pytest.approx(1.5e-5 * p * c, rel=1e-12)
            assert lat.chunk_pass_ms(p, c) == pytest.approx(chunk_prefix_formula_ms(p, c), rel=1e-12)
    # Between grid points, and between prefix 0 (the implicit T_prefill row) and 512: bilinear.
    for p, c in [(700, 300), (1500, 200), (256, 512), (100, 128)]:
        assert lat.prefix_attention_ms(p, c) == pytest.approx(1.5e-5 * p * c, rel=1e-9)
    assert lat.prefix_attention_ms(0, 256) == 0.0
    # Below the smallest measured chunk (128) the term shrinks in proportion (an implicit
    # chunk-0 column), rather than charging a 1-token tail the attention of 128 tokens.
    assert lat.prefix_attention_ms(1024, 64) == pytest.approx(1.5e-5 * 1024 * 128 / 2, rel=1e-12)
    assert lat.prefix_attention_ms(1024, 1) == pytest.approx(1.5e-5 * 1024 * 128 / 128, rel=1e-12)
    # The differencing rule would give 0 here (the synthetic T_prefill is linear): the table wins.
    plain = StepLatency(profile)
    assert plain.prefix_attention_ms(1024, 512) == pytest.approx(0.0, abs=1e-12)
    assert lat.prefix_attention_ms(1024, 512) == pytest.approx(1.5e-5 * 1024 * 512)


def test_chunk_prefix_extrapolation_is_flagged_beyond_the_table(profile: ProfileResult) -> None:
    lat = StepLatency(with_chunk_prefix(profile))
    assert lat.ranges.chunk_prefix_prefix == (0, 2048) and lat.ranges.chunk_prefix_chunk == (128, 512)
    assert not lat.is_chunk_prefix_extrapolated(2048, 512)
    assert not lat.is_chunk_prefix_extrapolated(10, 64)  # below the grid: clamped, not beyond
    assert lat.is_chunk_prefix_extrapolated(2049, 256) and lat.is_chunk_prefix_extrapolated(100, 513)
    assert not StepLatency(profile).is_chunk_prefix_extrapolated(10**6, 10**6)  # no table, no lookup


def test_an_engine_step_reads_the_chunk_prefix_table(profile: ProfileResult) -> None:
    from solver.sim.batching_gpu import BatchingGpu

    lat = StepLatency(with_chunk_prefix(profile))
    gpu = BatchingGpu(0, lat, 512, [1000], [2], use_runs=False)
    gpu.add_prefill(0)
    first = gpu.start(0.0)
    assert first is not None and first == pytest.approx(P.prefill_formula_ms(512))
    gpu.end_step()
    second = gpu.start(first)
    assert second is not None
    # Tokens 512..1000 over the 512-token prefix: one pass of the table's (512, 488).
    assert second - first == pytest.approx(chunk_prefix_formula_ms(512, 488), rel=1e-12)


def test_ranges_name_each_tables_measured_box(latency: StepLatency) -> None:
    r = latency.ranges
    assert r.prefill_prompt == (64, 2048) and r.decode_kv == (128, 2048) and r.decode_batch == (1, 32)
    assert r.interference_chunk == (64, 512) and r.interference_batch == (1, 16)
    assert r.chunk_prefix_prefix is None and r.chunk_prefix_chunk is None
    assert latency.is_decode_extrapolated(2048.5, 1) and latency.is_decode_extrapolated(100.0, 33)
    assert not latency.is_decode_extrapolated(2048.0, 32) and not latency.is_decode_extrapolated(5.0, 1)
    assert latency.is_interference_extrapolated(513, 4) and latency.is_interference_extrapolated(64, 17)
    assert not latency.is_interference_extrapolated(512, 16)
