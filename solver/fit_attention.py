"""The attention terms of the queue-aware forms: a prefill's, a chunk's over its prefix, and
the decode step's context term at long context (``solver.fit_queue`` calls these).

Attention is the part of a pass that grows with the context, not with the new tokens alone: a
causal pass over a u-token prompt scores ``u^2 / 2`` token pairs, a c-token chunk over a p-token
prefix ``c * p`` more (and its own ``c^2 / 2``, already in the chunk form's square term).

- ``prefill_ms_per_token_sq`` (``T_P(u) += q * u^2``) is fitted with the prefill form, only from a
  profile measuring prompts of at least ``LONG_PROMPT_TOKENS``. Below it the term is not
  identifiable: on the shipped 2,048-token profiles the knee's curvature takes it (the fit there
  gives ``3.0e-6`` ms/token^2 for Qwen3-8B on H100, seven times what the 32k profile measures,
  ``4.1e-7``), and extrapolated to 32k it would add 3 s. A profile without long prompts fits the
  forms before the term, bit for bit, with the term 0.
- ``chunk_ms_per_token_prefix`` (``e``: a chunk adds ``e * c * p``) is fitted from
  ``T_chunk_prefix`` when the profile has it: least squares of ``T(p, c) = a_c + e * c * p`` with
  one intercept ``a_c`` per chunk size (the chunk's pass without a prefix), whose closed form is
  the pooled within-chunk slope. Without the table it is derived from the prefill's term: the
  pairs of a prompt are ``u^2 / 2``, so ``e = 2 q`` (reported as derived, without R^2).
- The decode step's ``decode_ms_per_context_token``: its form is unchanged; where the profile
  reaches ``LONG_PROMPT_TOKENS`` of context, the fit's R^2 and worst residual over those points
  are reported beside the whole grid's.

Every sum is ``math.fsum``: the same profile fits to the same bits anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from solver.fit_report import ParameterFit, Residual, quality_warnings, residuals_of
from solver.lstsq import r_squared

LONG_PROMPT_TOKENS = 8192  # the attention term is fitted from profiles reaching this prompt length


def prefill_attention_fit(prefill: ParameterFit, t_prefill: Mapping[int, float], sq: float) -> ParameterFit:
    """The report's entry for ``prefill_ms_per_token_sq``, fitted with ``prefill`` (its R^2 and
    residuals are that form's), with the share of the longest prompt's pass it carries."""
    longest = max(t_prefill)
    return ParameterFit(
        name="queue_aware.prefill_attention",
        value=sq,
        unit="ms/token^2",
        method="the per_token_sq * L^2 term of queue_aware.prefill, fitted with it "
        f"(prompts up to {longest} tokens; R^2 and residuals are that form's)",
        r_squared=prefill.r_squared,
        diagnostics={
            "share_of_longest_prefill": sq * float(longest) * float(longest) / t_prefill[longest],
            "chunk_ms_per_token_prefix_implied": 2.0 * sq,
        },
    )


def _chunk_prefix_slope(table: Mapping[tuple[int, int], float]) -> tuple[float, dict[int, float]] | None:
    """``e`` and the per-chunk intercepts of ``T(p, c) = a_c + e * c * p``; ``None`` when no chunk
    size has two prefixes (the slope is not determined)."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for (prefix, chunk), ms in sorted(table.items()):
        groups.setdefault(chunk, []).append((float(chunk) * float(prefix), ms))
    means = {
        c: (math.fsum(x for x, _ in pts) / len(pts), math.fsum(y for _, y in pts) / len(pts))
        for c, pts in groups.items()
    }
    sxx = math.fsum((x - means[c][0]) ** 2 for c, pts in groups.items() for x, _ in pts)
    if sxx == 0.0:
        return None
    sxy = math.fsum((x - means[c][0]) * (y - means[c][1]) for c, pts in groups.items() for x, y in pts)
    e = max(0.0, sxy / sxx)
    return e, {c: means[c][1] - e * means[c][0] for c in groups}


def fit_chunk_prefix(
    table: Mapping[tuple[int, int], float], prefill_sq: float
) -> tuple[ParameterFit | None, float]:
    """``chunk_ms_per_token_prefix`` and its report entry (module docstring); ``(None, 0.0)`` when
    the profile has neither ``T_chunk_prefix`` nor a prefill attention term."""
    derived = 2.0 * prefill_sq
    solved = _chunk_prefix_slope(table) if table else None
    if solved is None:
        if derived == 0.0 and not table:
            return None, 0.0
        warnings = []
        if table:
            warnings.append(
                "T_chunk_prefix has no chunk size at two prefix lengths: the slope is not "
                "measured, derived from the prefill's attention term instead"
            )
        fit = ParameterFit(
            name="queue_aware.chunk_prefix",
            value=derived,
            unit="ms/token^2",
            method="derived from queue_aware.prefill_attention: a prompt's causal attention is "
            "u^2 / 2 token pairs, a c-chunk over prefix p c * p pairs, so e = 2 * per_token_sq",
            warnings=tuple(warnings),
            diagnostics={"derived": True},
        )
        return fit, derived
    e, intercepts = solved
    keys = sorted(table)
    measured = [table[k] for k in keys]
    fitted = [intercepts[c] + e * float(c) * float(p) for p, c in keys]
    r2 = r_squared(measured, fitted)
    res = residuals_of([f"p={p},chunk={c}" for p, c in keys], measured, fitted)
    fit = ParameterFit(
        name="queue_aware.chunk_prefix",
        value=e,
        unit="ms/token^2",
        method="least squares of T_chunk_prefix = a_c + e * c * p, one intercept per chunk size (e >= 0)",
        r_squared=r2,
        residuals=res,
        warnings=tuple(quality_warnings("the chunk-prefix form", r2, res)),
        diagnostics={
            "derived": False,
            "intercept_ms_by_chunk": {str(c): a for c, a in sorted(intercepts.items())},
            "from_prefill_attention": derived,
        },
    )
    return fit, e


def long_context_check(residuals: Sequence[Residual], context_lens: Sequence[int]) -> dict[str, float | None]:
    """The decode-step fit over the points at ``LONG_PROMPT_TOKENS`` or more of context (their
    R^2 and worst relative residual); empty when the profile has none."""
    long = [r for r, kv in zip(residuals, context_lens, strict=True) if kv >= LONG_PROMPT_TOKENS]
    if len(long) < 2:
        return {}
    rel = [abs(r.relative) for r in long if r.relative is not None]
    return {
        "long_context_r_squared": r_squared([r.measured_ms for r in long], [r.fitted_ms for r in long]),
        "long_context_max_abs_relative_residual": max(rel) if rel else None,
        "long_context_points": float(len(long)),
    }
