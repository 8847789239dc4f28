"""The up-front range check: a run that would read a table beyond its measured range is refused.

``StepLatency`` interpolates inside each table's measured box and extends the last segment
linearly above it (``solver.sim.latency``). Such an extension is a guess (attention's quadratic
growth, a batch the GPU never ran), so the simulator never makes one silently: before a run,
``check_ranges`` compares what the workload and fleet can ask for with what the profile
measured, and ``ClusterSimulation`` raises ``InvalidSimConfig`` with the first offending value
unless the fleet (or ``simulate``'s argument) says ``allow_extrapolation``; then the run goes
ahead and counts, per table, the steps whose lookup went beyond (``SimRecords.extrapolated``).

What is checked, each against the table that answers it:

- prompt lengths against ``T_prefill`` (prefill-pool passes, unchunked collocated prompts);
  with a finite KV capacity a preempted request re-prefills its prompt plus the tokens it had
  generated, so the longest context less one is checked instead;
- decode contexts (prompt + output - 1 tokens, the last decode step's) against ``T_decode``'s
  kv_len, for requests with more than one output token;
- the decode batch bound, ``min(max_num_seqs, requests)``, against ``T_decode``'s batches and,
  when prompts are prefilled on engine GPUs, against ``T_interference``'s decode batches;
- the prefill chunk beside decodes, up to ``max_num_batched_tokens - 1`` tokens (one decode
  token at least), against ``T_interference``'s chunks, and a prefill-only step's tokens, up to
  ``max_num_batched_tokens``, against ``T_prefill``;
- with ``T_chunk_prefix``: the chunk (up to ``max_num_batched_tokens``) and the prefix (up to
  the longest prompt, or context with KV capacity, less one) against its measured box.

Below the smallest grid point a lookup clamps (a pass's fixed cost): never refused, never
counted. The bounds are what a run *can* ask for, so a run that passes the check makes no
extrapolated lookup (the counters stay 0; the tests hold the simulator to it).
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.sim.fleet import FleetConfig
from solver.sim.latency import StepLatency

FLAG_HINT = "run with --allow-extrapolation (allow_extrapolation=True) to extend the tables linearly"


def _tokens(n: int) -> str:
    return f"{n:,}"


def _box(span: tuple[int, int], unit: str) -> str:
    return f"{span[0]:,}-{span[1]:,} {unit}"


def range_problems(
    latency: StepLatency,
    prompt_len: Sequence[int],
    output_len: Sequence[int],
    fleet: FleetConfig,
    kv_capacity_tokens: int | None,
) -> list[str]:
    """Every value the run could look up beyond a table's measured range, as one-line messages
    (empty: the run stays inside the measurements). ``kv_capacity_tokens`` is the capacity in
    force (None: unlimited, no preemption)."""
    if not prompt_len:
        return []
    r = latency.ranges
    problems: list[str] = []
    max_prompt = max(prompt_len)
    contexts = [p + o - 1 for p, o in zip(prompt_len, output_len, strict=True) if o > 1]
    max_context = max(contexts) if contexts else None
    engines_prefill = fleet.can_collocate or kv_capacity_tokens is not None
    # What a prefill pass can be: a prompt, or (preemption) a prompt plus its generated tokens.
    longest_prefill, what = max_prompt, "prompts"
    if kv_capacity_tokens is not None and max_context is not None and max_context > max_prompt:
        longest_prefill, what = max_context, "re-prefills after a preemption (context less one)"
    if longest_prefill > r.prefill_prompt[1]:
        problems.append(
            f"{what} up to {_tokens(longest_prefill)} tokens, but the profile's T_prefill covers "
            f"{_box(r.prefill_prompt, 'tokens')}"
        )
    if max_context is not None and max_context > r.decode_kv[1]:
        problems.append(
            f"decode contexts (prompt + output - 1) up to {_tokens(max_context)} tokens, but the "
            f"profile's T_decode covers kv_len {_box(r.decode_kv, 'tokens')}"
        )
    batch_bound = min(fleet.max_num_seqs, len(prompt_len))
    if max_context is not None and batch_bound > r.decode_batch[1]:
        problems.append(
            f"decode batches up to {batch_bound:,} (max_num_seqs {fleet.max_num_seqs:,}), but the "
            f"profile's T_decode covers batches {_box(r.decode_batch, 'sequences')}"
        )
    if engines_prefill:
        budget = fleet.max_num_batched_tokens
        beside = min(budget - 1, sum(prompt_len))
        if max_context is not None and beside > r.interference_chunk[1]:
            problems.append(
                f"prefill chunks beside decodes up to {_tokens(beside)} tokens (max_num_batched_tokens "
                f"{budget:,}), but the profile's T_interference covers chunks "
                f"{_box(r.interference_chunk, 'tokens')}"
            )
        if max_context is not None and batch_bound - 1 > r.interference_batch[1]:
            problems.append(
                f"decode batches beside a prefill chunk up to {batch_bound - 1:,} (max_num_seqs "
                f"{fleet.max_num_seqs:,}), but the profile's T_interference covers decode batches "
                f"{_box(r.interference_batch, 'sequences')}"
            )
        alone = min(budget, sum(prompt_len))
        if alone > r.prefill_prompt[1] and longest_prefill <= r.prefill_prompt[1]:
            problems.append(
                f"prefill-only steps up to {_tokens(alone)} tokens (max_num_batched_tokens {budget:,}), "
                f"but the profile's T_prefill covers {_box(r.prefill_prompt, 'tokens')}"
            )
        cp_prefix, cp_chunk = r.chunk_prefix_prefix, r.chunk_prefix_chunk
        if cp_prefix is not None and cp_chunk is not None and longest_prefill > 1:
            chunk = min(budget, longest_prefill - 1)
            if longest_prefill - 1 > cp_prefix[1]:
                problems.append(
                    f"chunk prefixes up to {_tokens(longest_prefill - 1)} tokens, but the profile's "
                    f"T_chunk_prefix covers prefix_len {_box(cp_prefix, 'tokens')}"
                )
            if chunk > cp_chunk[1]:
                problems.append(
                    f"continued chunks up to {_tokens(chunk)} tokens (max_num_batched_tokens {budget:,}), "
                    f"but the profile's T_chunk_prefix covers chunks {_box(cp_chunk, 'tokens')}"
                )
    return problems


def decode_steps_beyond(latency: StepLatency, first: int, last: int, offset: float, batch: int) -> int:
    """Steps ``first..last`` of a decode run (context ``offset + step`` in step ``step``) whose
    ``T_decode`` lookup lies beyond its measured range: all of them above the measured batches,
    else those past its kv_len, found with the comparison a single step makes."""
    if last < first or (batch <= latency.max_decode_batch and offset + last <= latency.max_decode_kv):
        return 0
    if batch > latency.max_decode_batch:
        return last - first + 1
    limit = latency.max_decode_kv
    k = first  # the first step beyond
    if offset + first <= limit:
        k = max(first, int(limit - offset))
        while offset + k <= limit:
            k += 1
        while k > first and offset + (k - 1) > limit:
            k -= 1
    return last - k + 1


def refusal(problems: Sequence[str]) -> str:
    """The one-line refusal: the first problem, how many more, and the flag."""
    more = f" (and {len(problems) - 1} more beyond the profile)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}; {FLAG_HINT}"
