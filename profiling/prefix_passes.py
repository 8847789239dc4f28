"""Passes of new prompt tokens over a prefix already in the paged KV cache.

Two measurements of long context use them:

- ``T_chunk_prefix[(prefix_len, chunk)]``: blocks for ``prefix_len + chunk`` tokens are
  allocated and the prefix's K/V written into them by running the prefix itself through the
  model, in passes of at most ``FILL_TOKENS`` (so a prefix too long for one forward still
  fits). Then a step of ``chunk`` fresh tokens with ``num_cached = prefix_len`` over the same
  block table is timed: its queries attend causally to themselves and to every cached token
  (``profiling.batch``'s end-aligned mask; flash-attn's ``cache_seqlens``), and write their own
  K/V after the prefix. Every timed run writes the same slots again, so the cache never grows.
- A prefill measured in passes (``chunked_prefill``), for a prompt whose single forward does
  not fit in memory (or is asked to be chunked): ``T_prefill[L]`` is the sum over passes
  ``i = 0, C, 2C, ...`` of the median time of ``min(C, L - i)`` new tokens over ``i`` cached
  ones, the way a chunked-prefill engine runs a long prompt (vLLM splits it into passes of
  ``max_num_batched_tokens``). Each timed pass writes its own K/V, so pass ``i + 1`` finds the
  cache that pass ``i`` left. The samples are the run-wise sums of the passes' samples. It is
  not one forward, so the profile lists such points in ``provenance["chunked_prefill"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner
from profiling.timing import Timing, time_interleaved

FILL_TOKENS = 8192  # tokens per untimed pass that writes a prefix into the cache
CHUNKED_PREFILL_TOKENS = 8192  # pass size of a prefill that does not fit in one forward


class PrefixPasses:
    """Timed and untimed passes of new tokens over a sequence's cached tokens on one runner."""

    def __init__(
        self,
        runner: ModelRunner,
        tokens: Callable[[int], tuple[int, ...]],
        *,
        warmup: int,
        repeats: int,
        use_graphs: bool,
    ) -> None:
        self.runner, self.tokens = runner, tokens
        self.warmup, self.repeats, self.use_graphs = warmup, repeats, use_graphs

    def fill(self, table: list[int], num_tokens: int, pass_tokens: int = FILL_TOKENS) -> None:
        """Write the K/V of ``num_tokens`` prompt tokens into ``table`` (untimed passes)."""
        for start in range(0, num_tokens, pass_tokens):
            n = min(pass_tokens, num_tokens - start)
            batch = self.runner.prepare([SequenceChunk(self.tokens(n), start, tuple(table))])
            self.runner.forward(batch)
        self.runner.synchronize()

    def time_pass(self, table: list[int], num_cached: int, num_tokens: int) -> Timing:
        """One pass of ``num_tokens`` fresh tokens after ``num_cached`` cached ones in ``table``."""
        batch = self.runner.prepare([SequenceChunk(self.tokens(num_tokens), num_cached, tuple(table))])
        fn = self.runner.capture(batch) if self.use_graphs else partial(self.runner.forward, batch)
        return time_interleaved([fn], warmup=self.warmup, repeats=self.repeats, device=self.runner.device)[0]

    def chunked_prefill(self, num_tokens: int, pass_tokens: int) -> Timing:
        """A ``num_tokens`` prompt as passes of ``pass_tokens`` (module docstring): the sum of
        the passes' medians, with the run-wise sums as samples."""
        table = self.runner.allocator.allocate(num_tokens)
        try:
            passes = [
                self.time_pass(table, start, min(pass_tokens, num_tokens - start))
                for start in range(0, num_tokens, pass_tokens)
            ]
        finally:
            self.runner.allocator.free(table)
        samples = tuple(sum(run) for run in zip(*(p.samples_ms for p in passes), strict=True))
        return Timing(median_ms=sum(p.median_ms for p in passes), samples_ms=samples)


def num_passes(num_tokens: int, pass_tokens: int) -> int:
    """Passes of at most ``pass_tokens`` that cover ``num_tokens``."""
    return -(-num_tokens // pass_tokens)
