"""The P/D split solver: co-located baseline, CUF and TUF candidates, and a reference optimum.

Notation (the design document's): X machines, x of them decode and X - x prefill; prompt length
L_p and output length L_d (tokens); per machine a prefill batch B_p = n_p * L_p tokens and a
decode batch n_d requests; T_p, T_d tokens/s and C_p, C_d GB at a batch; C the memory and C_w the
weights of one machine. Batches are continuous; machine counts are integers.

* Baseline: n_p = n_d = n with C_p(n*L_p) + C_d(n) - C_w = C; flow balance
  alpha*T_p/L_p = (1 - alpha)*T_d/L_d gives R_u = X*a_p*a_d/(a_p + a_d) with a_p = T_p(n*L_p)/L_p
  and a_d = T_d(n)/L_d; P_u = R_u*L_p and D_u = R_u*L_d.
* CUF at every x: both batches at their capacity limits; the faster side is throttled
  (alpha < 1) to the slower side's request rate. The time-saturated side names the policy.
* TUF: alpha_p = alpha_d = 1 and both (X - x)*n_p = x*n_d and (X - x)*T_p/L_p = x*T_d/L_d;
  TUF-P keeps B_p at its limit, TUF-D keeps n_d at its limit, the other batch follows from the
  concurrency balance. The continuous root x* of the rate balance is mapped to its neighbouring
  integers, where the other batch is recomputed (clipped into [one request, its limit]) and the
  residuals are recorded.

Every candidate's batches lie within [one request, capacity limit], so the reference optimum
(``solver.plan.reference``), which searches x and both batches over the same ranges, bounds it above.
The TUF roots are found in ``solver.plan.tuf_roots``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from solver.plan.baseline import Limits
from solver.plan.curves import throughput_at
from solver.plan.fitted import FittedCurves
from solver.plan.tuf_roots import TufRoots, tuf_roots

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Candidate:
    """One split configuration (fleet totals; batches per machine)."""

    policy: str  # "CUF-P", "CUF-D", "TUF-P" or "TUF-D"
    decode_machines: int  # x
    prefill_machines: int  # X - x
    prefill_batch_tokens: float  # B_p = n_p * L_p
    prefill_concurrency: float  # n_p
    decode_batch: float  # n_d
    prefill_memory_gb: float  # C_p(B_p)
    decode_memory_gb: float  # C_d(n_d)
    prefill_capacity_util: float  # B_p / prefill limit
    decode_capacity_util: float  # n_d / decode limit
    prefill_time_util: float  # alpha_p
    decode_time_util: float  # alpha_d
    concurrency_residual: float  # ((X-x)*n_p - x*n_d) / max of the two
    rate_residual: float  # (P_s/L_p - D_s/L_d) / max of the two
    prefill_tokens_per_s: float  # P_s
    decode_tokens_per_s: float  # D_s
    rate_rps: float  # R_s = min(P_s/L_p, D_s/L_d)
    x_continuous: float | None  # TUF: the continuous solution this x neighbours


@dataclass(frozen=True)
class CandidateTable:
    """Candidates as columns (one row each); ``row(i)`` gives a ``Candidate``."""

    policy: tuple[str, ...]
    decode_machines: IntArray
    prefill_machines: IntArray
    prefill_batch_tokens: FloatArray
    prefill_concurrency: FloatArray
    decode_batch: FloatArray
    prefill_memory_gb: FloatArray
    decode_memory_gb: FloatArray
    prefill_capacity_util: FloatArray
    decode_capacity_util: FloatArray
    prefill_time_util: FloatArray
    decode_time_util: FloatArray
    concurrency_residual: FloatArray
    rate_residual: FloatArray
    prefill_tokens_per_s: FloatArray
    decode_tokens_per_s: FloatArray
    rate_rps: FloatArray
    x_continuous: FloatArray  # NaN for CUF rows

    def __len__(self) -> int:
        return len(self.policy)

    def row(self, i: int) -> Candidate:
        skip = {"policy", "decode_machines", "prefill_machines", "x_continuous"}
        floats = {f.name: float(getattr(self, f.name)[i]) for f in fields(self) if f.name not in skip}
        x_cont = float(self.x_continuous[i])
        return Candidate(
            policy=self.policy[i],
            decode_machines=int(self.decode_machines[i]),
            prefill_machines=int(self.prefill_machines[i]),
            x_continuous=None if np.isnan(x_cont) else x_cont,
            **floats,
        )


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _residual(a: FloatArray, b: FloatArray) -> FloatArray:
    return _ratio(a - b, np.maximum(a, b))


class _Rows(NamedTuple):
    """Candidate rows before evaluation: decode machines, batches, and the TUF label (None: CUF)."""

    x: IntArray
    b_p: FloatArray
    n_d: FloatArray
    tuf_labels: tuple[str | None, ...]
    is_tuf: BoolArray  # the rows with a TUF label
    x_cont: FloatArray


def _table(model: FittedCurves, limits: Limits, sizes: tuple[int, int, int], rows: _Rows) -> CandidateTable:
    """Evaluate ``rows``: TUF rows (labelled) run both sides at alpha = 1; CUF rows (label None)
    throttle the faster side. Rows with a zero request rate are dropped. Every figure is
    elementwise, so evaluating CUF and TUF rows together gives the same values as apart."""
    machines, prompt_len, output_len = sizes
    x, b_p, n_d = rows.x, rows.b_p, rows.n_d
    is_tuf = rows.is_tuf
    xf = x.astype(np.float64)
    t_p = throughput_at(model.prefill.throughput, b_p)
    t_d = throughput_at(model.decode.throughput, n_d)
    a_p = (machines - xf) * t_p / prompt_len  # requests/s the prefill pool can start
    a_d = xf * t_d / output_len  # requests/s the decode pool can finish
    rate = np.minimum(a_p, a_d)
    # CUF: the faster side idles to the slower side's rate; TUF: both sides saturated
    alpha_p = np.where(is_tuf, 1.0, np.where(a_p > 0, _ratio(rate, a_p), 1.0))
    alpha_d = np.where(is_tuf, 1.0, np.where(a_d > 0, _ratio(rate, a_d), 1.0))
    cuf_policy = np.where(a_p <= a_d, "CUF-P", "CUF-D").tolist()
    policy = tuple(c if t is None else t for c, t in zip(cuf_policy, rows.tuf_labels, strict=True))
    # CUF serves alpha*a = rate, taken as is (without the rounding of multiplying back)
    served_p, served_d = np.where(is_tuf, a_p, rate), np.where(is_tuf, a_d, rate)
    n_p = b_p / prompt_len
    table = CandidateTable(
        policy=policy,
        decode_machines=x,
        prefill_machines=machines - x,
        prefill_batch_tokens=b_p,
        prefill_concurrency=n_p,
        decode_batch=n_d,
        prefill_memory_gb=model.prefill.capacity(b_p),
        decode_memory_gb=model.decode.capacity(n_d),
        prefill_capacity_util=b_p / limits.prefill.batch,
        decode_capacity_util=n_d / limits.decode.batch,
        prefill_time_util=alpha_p,
        decode_time_util=alpha_d,
        concurrency_residual=_residual((machines - xf) * n_p, xf * n_d),
        rate_residual=_residual(served_p, served_d),
        prefill_tokens_per_s=served_p * prompt_len,  # P_s = alpha_p*(X - x)*T_p
        decode_tokens_per_s=served_d * output_len,  # D_s = alpha_d*x*T_d
        rate_rps=rate,
        x_continuous=rows.x_cont,
    )
    # a row whose slower side delivers nothing (zero throughput at its batch) is not a split
    return table if np.all(rate > 0.0) else take(table, np.nonzero(rate > 0.0)[0])


def _cuf_rows(limits: Limits, machines: int) -> _Rows:
    x = np.arange(1, machines, dtype=np.int64)
    b_p = np.full(len(x), limits.prefill.batch)
    n_d = np.full(len(x), limits.decode.batch)
    return _Rows(x, b_p, n_d, (None,) * len(x), np.zeros(len(x), dtype=bool), np.full(len(x), np.nan))


def cuf_candidates(
    model: FittedCurves, limits: Limits, machines: int, prompt_len: int, output_len: int
) -> CandidateTable:
    """One CUF row per x in 1..X-1 (with a positive rate), both batches at their capacity limits."""
    return _table(model, limits, (machines, prompt_len, output_len), _cuf_rows(limits, machines))


def _tuf_rows(
    model: FittedCurves,
    limits: Limits,
    machines: int,
    prompt_len: int,
    output_len: int,
    roots: TufRoots | None = None,
) -> tuple[_Rows, tuple[tuple[str, float], ...]]:
    big_x = float(machines)
    cap_p, cap_d = limits.prefill.batch, limits.decode.batch
    m = cap_p / prompt_len  # n_p at the prefill limit
    if roots is None:
        roots = tuf_roots(model, limits, machines, prompt_len, [output_len])[0]
    found: list[tuple[str, float]] = []
    labels: list[str | None] = []
    columns: list[tuple[IntArray, FloatArray, FloatArray, FloatArray]] = [
        (np.empty(0, dtype=np.int64), np.empty(0), np.empty(0), np.empty(0))
    ]
    for label, at in roots.items():
        if len(at) == 0:
            continue
        found.extend((label, float(r)) for r in at)
        near = np.concatenate((np.floor(at), np.ceil(at)))
        xs, first = np.unique(np.clip(near, 1, machines - 1).astype(np.int64), return_index=True)
        x_cont = np.concatenate((at, at))[first]
        xf = xs.astype(np.float64)
        if label == "TUF-P":  # concurrency balance with n_p = m gives n_d
            b_p, n_d = np.full(len(xs), cap_p), np.clip((big_x - xf) * m / xf, 1.0, cap_d)
        else:  # concurrency balance with n_d = cap_d gives n_p
            b_p, n_d = np.clip(xf * cap_d / (big_x - xf), 1.0, m) * prompt_len, np.full(len(xs), cap_d)
        labels.extend([label] * len(xs))
        columns.append((xs, b_p, n_d, x_cont))
    xs, b_p, n_d, x_cont = (np.concatenate(parts) for parts in zip(*columns, strict=True))
    return _Rows(xs, b_p, n_d, tuple(labels), np.ones(len(xs), dtype=bool), x_cont), tuple(found)


def tuf_candidates(
    model: FittedCurves, limits: Limits, machines: int, prompt_len: int, output_len: int
) -> tuple[CandidateTable, tuple[tuple[str, float], ...]]:
    """TUF-P and TUF-D rows at the integers next to each continuous root, and the roots."""
    rows, roots = _tuf_rows(model, limits, machines, prompt_len, output_len)
    return _table(model, limits, (machines, prompt_len, output_len), rows), roots


def all_candidates(
    model: FittedCurves,
    limits: Limits,
    machines: int,
    prompt_len: int,
    output_len: int,
    roots: TufRoots | None = None,
) -> tuple[CandidateTable, tuple[tuple[str, float], ...]]:
    """Every CUF row, then every TUF row (``concat`` of ``cuf_candidates`` and
    ``tuf_candidates``, equal to it value for value), evaluated in one pass; and the TUF roots.
    ``roots``, when given, are ``tuf_roots`` of the same model, limits and workload."""
    cuf = _cuf_rows(limits, machines)
    tuf, roots_found = _tuf_rows(model, limits, machines, prompt_len, output_len, roots)
    rows = _Rows(
        np.concatenate((cuf.x, tuf.x)),
        np.concatenate((cuf.b_p, tuf.b_p)),
        np.concatenate((cuf.n_d, tuf.n_d)),
        cuf.tuf_labels + tuf.tuf_labels,
        np.concatenate((cuf.is_tuf, tuf.is_tuf)),
        np.concatenate((cuf.x_cont, tuf.x_cont)),
    )
    return _table(model, limits, (machines, prompt_len, output_len), rows), roots_found


def take(table: CandidateTable, rows: IntArray) -> CandidateTable:
    """The given rows of ``table``, in that order."""
    columns: dict[str, Any] = {}
    for f in fields(CandidateTable):
        column = getattr(table, f.name)
        columns[f.name] = tuple(column[i] for i in rows) if f.name == "policy" else column[rows]
    return CandidateTable(**columns)


def concat(tables: list[CandidateTable]) -> CandidateTable:
    """Rows of ``tables`` in order, as one table."""
    columns: dict[str, Any] = {}
    for f in fields(CandidateTable):
        parts = [getattr(t, f.name) for t in tables]
        columns[f.name] = sum(parts, ()) if f.name == "policy" else np.concatenate(parts)
    return CandidateTable(**columns)


def cuf_balanced_x(limits: Limits, machines: int, prompt_len: int) -> tuple[int, float]:
    """The integer x nearest the CUF concurrency balance (X - x)*n_p = x*n_d, and its real value."""
    n_p = limits.prefill.batch / prompt_len
    x_real = machines * n_p / (n_p + limits.decode.batch)
    return int(np.clip(np.rint(x_real), 1, machines - 1)), x_real
