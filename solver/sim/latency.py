"""Step latencies of the simulated engines, read from a ``ProfileResult``'s measured tables.

The simulator never uses the fitted analytical model for time: every step time comes from the
measured tables, so a simulation checks the model against the measurements it was fitted from.

Interpolation (stated once here, relied on by the tests):

- ``prefill_ms(L)`` = ``T_prefill`` piecewise linear in the prompt length ``L``. Below the
  smallest measured length the smallest point's value is used (a forward has a fixed cost);
  above the largest, the last segment is extended linearly (slope floored at 0). Attention's
  quadratic growth beyond the grid is therefore not extrapolated.
- ``decode_ms(kv, b)`` = ``T_decode`` bilinear in (kv_len, batch): first linear along the batch
  axis at each measured kv_len, then linear along kv_len. Each axis clamps below its smallest
  point and extends its last segment linearly above its largest (slope floored at 0). A missing
  cell of the kv_len x batch grid is filled from its kv_len row by the same 1-D rule.
- ``interference_ms(c, b)`` = ``T_interference`` bilinear in (chunk, decode_batch) by the same
  rules, with an implicit point ``(chunk=0) -> 0 ms`` (no prefill tokens, no interference), so
  a chunk smaller than the smallest measured one costs proportionally less. The result is
  floored at 0 (negative table entries are timing noise).
- ``transfer_ms(L)`` = ``L * bytes_per_token / (p2p_bandwidth_GBps * 1e6)``.

Engine step times built from these (see ``solver.sim.batching_gpu``): every step is one forward
pass. A decode-only step of ``b`` sequences with mean context ``kv`` takes ``decode_ms(kv, b)``;
a mixed step adds ``interference_ms(c, b)`` for its ``c`` prefill tokens (``T_interference`` is
``T_mixed - T_baseline``: the chunk rides in the decodes' pass, which reads the weights once, so
the measured difference is the chunk's price, not a second pass); a prefill-only step of ``c``
tokens takes ``prefill_ms(c)``. A chunk that continues a prompt (tokens ``p..p+c``, ``p > 0``)
also attends over its ``p``-token prefix: ``prefix_attention_ms(p, c)`` is added (below).

The chunk pass. One pass of tokens ``p..p+c`` costs the pass's fixed cost plus the tokens' work,
attention over the prefix included. ``T_prefill(p + c) - T_prefill(p)`` is that work (the one-
pass prefill of ``p + c`` tokens did it, with ``p``'s own work taken away); the fixed cost is
``pass_fixed_ms``: the intercept at zero tokens of the least-squares line through the
``T_prefill`` points at and above the largest measured chunk (the compute-bound part of the
curve; the two largest points when fewer lie there), clamped to ``[0, T_prefill(smallest)]``.
So ``chunk_pass_ms(p, c) = max(T_prefill(c), T_prefill(p + c) - T_prefill(p) + pass_fixed_ms)``
(a chunk is never cheaper than the same tokens with no prefix), and ``prefix_attention_ms(p, c)``
is its excess over ``T_prefill(c)``. A prompt chunked on an idle GPU therefore costs one pass
per chunk, more than one unchunked pass (on the default profile 1,024 tokens in two 512-token
chunks: 25.8 ms against 22.7 ms).

With a ``T_chunk_prefix`` table (``(prefix_len, chunk) -> ms`` of one pass of ``chunk`` new
tokens over ``prefix_len`` cached tokens, alone on the GPU) the chunk pass is read from it
instead: bilinear in (prefix_len, chunk) by the rules above, with the implicit row
``prefix_len = 0 -> T_prefill[chunk]`` at each measured chunk and the implicit column ``chunk =
0 -> 0 ms`` (below the smallest measured chunk the prefix term shrinks in proportion, as
interference does, instead of clamping), and ``prefix_attention_ms(p, c) = max(T_chunk_prefix(p,
c) - T_chunk_prefix(0, c), 0)``. Without the table, the differencing rule above holds, bit for
bit.

Measured ranges and extrapolation (``ranges``, ``TableRanges``). Every table covers a box of its
keys. Below the smallest grid point a lookup clamps to it (a forward's fixed cost: clamping is
not extrapolation; interference and chunk-prefix have their measured zero rows). Above the
largest point a lookup extends the last segment linearly: an extrapolation. The simulator
refuses a run that would make one (``solver.sim.extrapolation``) unless told
``allow_extrapolation``, and counts every step that makes one, per table
(``is_prefill_extrapolated``, ``is_decode_extrapolated``, ``is_interference_extrapolated``,
``is_chunk_prefix_extrapolated``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.errors import InvalidProfile
from solver.profile_result import ProfileResult

FloatArray = npt.NDArray[np.float64]


class Piecewise:
    """A 1-D piecewise-linear function: clamp below, extend the last segment above.

    ``segments[k]`` is ``(x0, y0, slope)`` for ``x`` in ``[xs[k-1], xs[k])``; segment 0 lies
    below ``xs[0]`` (flat) and the last one beyond ``xs[-1]``. Evaluating ``y0 + slope*(x-x0)``
    returns the table value exactly at every grid point.
    """

    __slots__ = ("_seg_arrays", "_xs_array", "segments", "xs")

    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        if not xs or len(xs) != len(ys):
            raise InvalidProfile("interpolation needs at least one point")
        self.xs = [float(x) for x in xs]
        y = [float(v) for v in ys]
        segments = [(self.xs[0], y[0], 0.0)]
        for k in range(1, len(self.xs)):
            slope = (y[k] - y[k - 1]) / (self.xs[k] - self.xs[k - 1])
            segments.append((self.xs[k - 1], y[k - 1], slope))
        last_slope = max(segments[-1][2], 0.0) if len(self.xs) > 1 else 0.0
        segments.append((self.xs[-1], y[-1], last_slope))
        self.segments = segments
        self._xs_array = np.array(self.xs, dtype=np.float64)
        self._seg_arrays = tuple(np.array(col, dtype=np.float64) for col in zip(*segments, strict=True))

    def __call__(self, x: float) -> float:
        x0, y0, slope = self.segments[bisect_right(self.xs, x)]
        return y0 + slope * (x - x0)

    def many(self, x: FloatArray) -> FloatArray:
        """Vectorised ``__call__``: the same operations per element, so the same bits."""
        x0, y0, slope = self._seg_arrays
        k = self._xs_array.searchsorted(x, side="right")
        result: FloatArray = y0[k] + slope[k] * (x - x0[k])
        return result


class Grid2D:
    """Bilinear interpolation over a (row, column) grid: along columns first, then rows.

    Rows are the continuous axis (kv_len or chunk), columns the integer axis (batch); a
    ``Piecewise`` along the rows is cached per column value, so the hot path is one bisect.
    """

    def __init__(self, table: Mapping[tuple[int, int], float], name: str, zero_row: bool) -> None:
        if not table:
            raise InvalidProfile(f"{name}: empty")
        rows = sorted({r for r, _ in table})
        cols = sorted({c for _, c in table})
        filled: list[list[float]] = []
        for r in rows:
            present = [(c, table[(r, c)]) for c in cols if (r, c) in table]
            along = Piecewise([c for c, _ in present], [v for _, v in present])
            filled.append([table[(r, c)] if (r, c) in table else along(c) for c in cols])
        if zero_row and rows[0] > 0:
            rows = [0, *rows]
            filled = [[0.0] * len(cols), *filled]
        self._rows = [float(r) for r in rows]
        # One Piecewise per measured row, along the column axis.
        self._by_row = [Piecewise(cols, vals) for vals in filled]
        self._cache: dict[int, Piecewise] = {}

    def at_column(self, col: int) -> Piecewise:
        """The row-axis function at column ``col`` (built once per column value)."""
        fn = self._cache.get(col)
        if fn is None:
            fn = Piecewise(self._rows, [f(col) for f in self._by_row])
            self._cache[col] = fn
        return fn

    def __call__(self, row: float, col: int) -> float:
        return self.at_column(col)(row)


@dataclass(frozen=True)
class TableRanges:
    """The measured box of each table (inclusive ``(low, high)`` per key, tokens or sequences)."""

    prefill_prompt: tuple[int, int]  # T_prefill: prompt_len
    decode_kv: tuple[int, int]  # T_decode: kv_len
    decode_batch: tuple[int, int]  # T_decode: batch
    interference_chunk: tuple[int, int]  # T_interference: chunk
    interference_batch: tuple[int, int]  # T_interference: decode_batch
    chunk_prefix_prefix: tuple[int, int] | None  # T_chunk_prefix: prefix_len (None: no table)
    chunk_prefix_chunk: tuple[int, int] | None  # T_chunk_prefix: chunk


def _span(values: Iterable[int]) -> tuple[int, int]:
    vs = sorted(values)
    return vs[0], vs[-1]


class StepLatency:
    """Step-time lookups for one profile (ms); see the module docstring for the rules."""

    def __init__(self, profile: ProfileResult) -> None:
        if not profile.T_prefill:
            raise InvalidProfile("T_prefill: empty")
        lens = sorted(profile.T_prefill)
        self._prefill = Piecewise(lens, [profile.T_prefill[k] for k in lens])
        self._decode = Grid2D(profile.T_decode, "T_decode", zero_row=False)
        self._interference = Grid2D(profile.T_interference, "T_interference", zero_row=True)
        self._interference_cache: dict[tuple[int, int], float] = {}
        self.transfer_ms_per_token = profile.bytes_per_token / (profile.p2p_bandwidth_GBps * 1e6)
        self.interference_kv_len = profile.interference_kv_len
        self.max_chunk = max(c for c, _ in profile.T_interference)
        self.max_prompt_len = lens[-1]
        self.pass_fixed_ms = _pass_fixed_ms(lens, [profile.T_prefill[k] for k in lens], self.max_chunk)
        self.kv_capacity_tokens = profile.kv_capacity_tokens  # the profile's, None when unknown
        self._chunk_prefix: Grid2D | None = None
        cp_prefix = cp_chunk = None
        if profile.T_chunk_prefix:
            table = dict(profile.T_chunk_prefix)
            chunks = {c for _, c in table}
            # The implicit row: a chunk over no prefix is a prefill of the chunk alone.
            table.update({(0, c): self._prefill(c) for c in chunks if (0, c) not in table})
            # The implicit column: no new tokens, no pass (so the prefix term of a chunk smaller
            # than the smallest measured one is proportionally smaller, as interference's is).
            table.update({(p, 0): 0.0 for p in {p for p, _ in table}})
            self._chunk_prefix = Grid2D(table, "T_chunk_prefix", zero_row=False)
            cp_prefix = _span(p for p, _ in table)
            cp_chunk = _span(chunks)
        self.ranges = TableRanges(
            prefill_prompt=(lens[0], lens[-1]),
            decode_kv=_span(k for k, _ in profile.T_decode),
            decode_batch=_span(b for _, b in profile.T_decode),
            interference_chunk=_span(c for c, _ in profile.T_interference),
            interference_batch=_span(b for _, b in profile.T_interference),
            chunk_prefix_prefix=cp_prefix,
            chunk_prefix_chunk=cp_chunk,
        )
        r = self.ranges
        self.max_decode_kv = r.decode_kv[1]
        self.max_decode_batch = r.decode_batch[1]
        self.max_interference_batch = r.interference_batch[1]
        self.max_prefix = cp_prefix[1] if cp_prefix is not None else None
        self.max_prefix_chunk = cp_chunk[1] if cp_chunk is not None else None
        # Whether a continued chunk's prefix attention is read from ``T_chunk_prefix``.
        self.has_chunk_prefix = self._chunk_prefix is not None

    def prefill_ms(self, prompt_len: float) -> float:
        """One prefill forward of ``prompt_len`` tokens on a GPU running nothing else (ms)."""
        return self._prefill(prompt_len) if prompt_len > 0 else 0.0

    def chunk_pass_ms(self, done: int, take: int) -> float:
        """One pass of tokens ``done..done+take`` of a prompt, alone on the GPU (ms): the pass's
        fixed cost plus the tokens' work over their prefix (module docstring)."""
        return self.prefill_ms(take) + self.prefix_attention_ms(done, take)

    def prefix_attention_ms(self, done: int, take: int) -> float:
        """What attending over a ``done``-token prefix adds to a ``take``-token chunk (ms, >= 0)."""
        if done <= 0:
            return 0.0
        table = self._chunk_prefix
        if table is not None:  # measured: the pass over the prefix less the pass over none
            fn = table.at_column(take)
            measured = fn(done) - fn(0)
            return measured if measured > 0.0 else 0.0
        prefill = self._prefill
        extra = prefill(done + take) - prefill(done) + self.pass_fixed_ms - prefill(take)
        return extra if extra > 0.0 else 0.0

    def is_extrapolated(self, prompt_tokens: int) -> bool:
        """Whether a prefill lookup at ``prompt_tokens`` lies beyond the measured grid."""
        return prompt_tokens > self.max_prompt_len

    is_prefill_extrapolated = is_extrapolated

    def is_decode_extrapolated(self, kv_len: float, batch: int) -> bool:
        """Whether a decode lookup lies beyond the measured kv_len or batch."""
        return kv_len > self.max_decode_kv or batch > self.max_decode_batch

    def is_interference_extrapolated(self, chunk: int, decode_batch: int) -> bool:
        """Whether an interference lookup lies beyond the measured chunk or decode batch."""
        return chunk > self.max_chunk or decode_batch > self.max_interference_batch

    def is_chunk_prefix_extrapolated(self, prefix_len: int, chunk: int) -> bool:
        """Whether a chunk-prefix lookup lies beyond the measured table (False without one)."""
        if self.max_prefix is None or self.max_prefix_chunk is None:
            return False
        return prefix_len > self.max_prefix or chunk > self.max_prefix_chunk

    def decode_ms(self, kv_len: float, batch: int) -> float:
        """One decode step of ``batch`` sequences whose mean context is ``kv_len`` tokens (ms)."""
        return self._decode.at_column(batch)(kv_len)

    def decode_fn(self, batch: int) -> Piecewise:
        """``kv_len -> ms`` of a decode step at ``batch`` (the engine's hot-path lookup)."""
        return self._decode.at_column(batch)

    def interference_ms(self, chunk: int, decode_batch: int) -> float:
        """Extra time of ``chunk`` prefill tokens in a step with ``decode_batch`` decodes (ms)."""
        key = (chunk, decode_batch)
        value = self._interference_cache.get(key)
        if value is None:
            value = max(self._interference(chunk, decode_batch), 0.0)
            self._interference_cache[key] = value
        return value

    def mixed_step_ms(self, kv_len: float, decode_batch: int, chunk: int) -> float:
        """A step running ``decode_batch`` decodes plus ``chunk`` prefill tokens (ms)."""
        return self.decode_ms(kv_len, decode_batch) + self.interference_ms(chunk, decode_batch)

    def transfer_ms(self, prompt_len: float) -> float:
        """KV-cache transfer of a ``prompt_len``-token prompt over the profile's link (ms)."""
        return prompt_len * self.transfer_ms_per_token


def _pass_fixed_ms(lens: Sequence[int], ms: Sequence[float], max_chunk: int) -> float:
    """A forward pass's fixed cost (ms): the zero-token intercept of the least-squares line
    through the prefill points at prompt lengths >= ``max_chunk`` (the two largest points when
    fewer lie there), clamped to ``[0, ms of the smallest prompt]``; 0 with a single point."""
    if len(lens) < 2:
        return 0.0
    pairs = [(x, y) for x, y in zip(lens, ms, strict=True) if x >= max_chunk]
    if len(pairs) < 2:
        pairs = list(zip(lens[-2:], ms[-2:], strict=True))
    x = np.array([p[0] for p in pairs], dtype=np.float64)
    y = np.array([p[1] for p in pairs], dtype=np.float64)
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
    intercept = float(y.mean()) - slope * float(x.mean())
    return min(max(intercept, 0.0), float(ms[0]))
