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

Engine step times built from these (see ``solver.sim.events``): a decode-only step of ``b``
sequences with mean context ``kv`` takes ``decode_ms(kv, b)``; a mixed step adds
``interference_ms(c, b)`` for its ``c`` prefill tokens (``T_interference`` is ``T_mixed -
T_baseline``, so at ``kv = interference_kv_len`` this is the measured mixed step); a
prefill-only step that carries tokens ``p..p+c`` of a prompt takes ``prefill_ms(p + c) -
prefill_ms(p)`` (with ``prefill_ms(0) = 0``), so a prompt prefilled in chunks on an idle GPU
costs exactly ``prefill_ms(L)``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

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

    def prefill_ms(self, prompt_len: float) -> float:
        """One prefill forward of ``prompt_len`` tokens on a GPU running nothing else (ms)."""
        return self._prefill(prompt_len) if prompt_len > 0 else 0.0

    def prefill_chunk_ms(self, done: int, take: int) -> float:
        """Tokens ``done..done+take`` of a prompt, alone on the GPU (ms): the prefill increment."""
        return self.prefill_ms(done + take) - self.prefill_ms(done)

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
