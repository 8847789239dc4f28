"""The profiler's measurements on one ``ModelRunner``: each method fills one table.

What each point runs is described in ``profiling.measure`` (the job) and, for the passes over a
cached prefix and chunked prefill, in ``profiling.prefix_passes``.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import torch

from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner
from profiling.errors import first_line
from profiling.points import PointRecorder
from profiling.prefix_passes import CHUNKED_PREFILL_TOKENS, PrefixPasses, num_passes
from profiling.timing import Timing, time_interleaved
from solver.profile_result import ProfileGrids


class Measurements:
    """The measurements on one runner (each method fills one table)."""

    def __init__(
        self,
        runner: ModelRunner,
        grids: ProfileGrids,
        *,
        use_graphs: bool,
        seed: int,
        prefill_pass_tokens: int | None = None,
    ) -> None:
        self.runner, self.grids, self.use_graphs = runner, grids, use_graphs
        self.prefill_pass_tokens = prefill_pass_tokens  # prompts longer than this run in passes
        self.chunked_prefill: dict[str, dict[str, Any]] = {}  # prefill points measured in passes
        self._rng = random.Random(seed)

    def _passes(self) -> PrefixPasses:
        g = self.grids
        return PrefixPasses(
            self.runner, self._tokens, warmup=g.warmup, repeats=g.repeats, use_graphs=self.use_graphs
        )

    def _tokens(self, n: int) -> tuple[int, ...]:
        return tuple(self._rng.randrange(self.runner.config.vocab_size) for _ in range(n))

    def _table(self, tables: dict[tuple[str, int], list[int]], kind: str, num_tokens: int) -> list[int]:
        """The block table of ``(kind, num_tokens)``, allocated on first use within one point."""
        if (kind, num_tokens) not in tables:
            tables[(kind, num_tokens)] = self.runner.allocator.allocate(num_tokens)
        return tables[(kind, num_tokens)]

    def _time(self, steps: list[tuple[int | None, int | None, int]]) -> tuple[Timing, ...]:
        """Time steps given as ``(prefill_len, kv_len, num_decodes)``, interleaved.

        Each step is an optional fresh prompt of ``prefill_len`` tokens plus ``num_decodes``
        decodes at ``kv_len`` that share one block table (the same table for every step).
        """
        alloc = self.runner.allocator
        tables: dict[tuple[str, int], list[int]] = {}
        try:
            fns = []
            for prefill_len, kv_len, num_decodes in steps:
                prefills, decodes = [], []
                if prefill_len is not None:
                    table = self._table(tables, "prefill", prefill_len)
                    prefills.append(SequenceChunk(self._tokens(prefill_len), 0, tuple(table)))
                if kv_len is not None and num_decodes:
                    table = self._table(tables, "decode", kv_len + 1)
                    decodes = [
                        SequenceChunk(self._tokens(1), kv_len, tuple(table)) for _ in range(num_decodes)
                    ]
                batch = self.runner.prepare(prefills, decodes)
                fns.append(
                    self.runner.capture(batch) if self.use_graphs else partial(self.runner.forward, batch)
                )
            return time_interleaved(
                fns, warmup=self.grids.warmup, repeats=self.grids.repeats, device=self.runner.device
            )
        finally:
            for table in tables.values():
                alloc.free(table)

    def _single(self, name: str, step: tuple[int | None, int | None, int]) -> dict[str, Timing]:
        return {name: self._time([step])[0]}

    def _prefill_point(self, n: int) -> dict[str, Timing]:
        """One forward of a fresh ``n``-token prompt; in passes (``profiling.prefix_passes``)
        when ``n`` exceeds ``prefill_pass_tokens``, or when that forward runs out of GPU memory."""
        name, pass_tokens = f"prefill/{n}", self.prefill_pass_tokens
        if pass_tokens is None or n <= pass_tokens:
            try:
                return self._single(name, (n, None, 0))
            except torch.OutOfMemoryError as exc:
                if n <= CHUNKED_PREFILL_TOKENS:
                    raise
                reason = f"one forward ran out of memory ({first_line(exc)[:120]})"
                torch.cuda.empty_cache()
                pass_tokens = CHUNKED_PREFILL_TOKENS
        else:
            reason = f"prompts over {pass_tokens} tokens are measured in passes (as requested)"
        timing = self._passes().chunked_prefill(n, pass_tokens)
        self.chunked_prefill[name] = {
            "pass_tokens": pass_tokens,
            "num_passes": num_passes(n, pass_tokens),
            "why": reason,
        }
        return {name: timing}

    def prefill(self, points: PointRecorder) -> dict[int, float]:
        out = {}
        for n in self.grids.prompt_lens:
            name = f"prefill/{n}"
            t = points.run(name, partial(self._prefill_point, n))
            if t is not None:
                out[n] = t[name].median_ms
        return out

    def _over_prefix(
        self, passes: PrefixPasses, prefix: int, chunk: int, filled: list[list[int]]
    ) -> dict[str, Timing]:
        """One chunk over a cached prefix; the prefix is written on first use into ``filled``."""
        if not filled:
            table = self.runner.allocator.allocate(prefix + max(self.grids.chunk_sizes))
            try:
                passes.fill(table, prefix)
            except BaseException:
                self.runner.allocator.free(table)
                raise
            filled.append(table)
        return {f"chunk_prefix/{prefix}x{chunk}": passes.time_pass(filled[0], prefix, chunk)}

    def chunk_prefix(self, points: PointRecorder) -> dict[tuple[int, int], float]:
        """``T_chunk_prefix``: each chunk size over each cached prefix (``profiling.prefix_passes``);
        a prefix is written into the cache once and serves every chunk size."""
        out: dict[tuple[int, int], float] = {}
        passes = self._passes()
        for prefix in self.grids.prefix_lens:
            filled: list[list[int]] = []  # the prefix's block table, once written
            try:
                for chunk in self.grids.chunk_sizes:
                    name = f"chunk_prefix/{prefix}x{chunk}"
                    t = points.run(name, partial(self._over_prefix, passes, prefix, chunk, filled))
                    if t is not None:
                        out[(prefix, chunk)] = t[name].median_ms
            finally:
                for table in filled:
                    self.runner.allocator.free(table)
        return out

    def decode(self, points: PointRecorder) -> dict[tuple[int, int], float]:
        out = {}
        for kv in self.grids.kv_lens:
            for b in self.grids.batch_sizes:
                name = f"decode/{kv}x{b}"
                t = points.run(name, partial(self._single, name, (None, kv, b)))
                if t is not None:
                    out[(kv, b)] = t[name].median_ms
        return out

    def _pair(self, chunk: int, kv: int, b: int) -> dict[str, Timing]:
        base, mixed = self._time([(None, kv, b), (chunk, kv, b)])
        return {f"baseline/{chunk}x{b}": base, f"mixed/{chunk}x{b}": mixed}

    def interference(self, points: PointRecorder) -> tuple[dict[tuple[int, int], float], ...]:
        """``(T_interference, T_mixed, T_baseline)``, each keyed by ``(chunk, B)``."""
        kv = self.grids.interference_kv_len
        diff, mixed, base = {}, {}, {}
        for c in self.grids.chunk_sizes:
            for b in self.grids.decode_batches:
                t = points.run(f"interference/{c}x{b}", partial(self._pair, c, kv, b))
                if t is not None:
                    base[(c, b)] = t[f"baseline/{c}x{b}"].median_ms
                    mixed[(c, b)] = t[f"mixed/{c}x{b}"].median_ms
                    diff[(c, b)] = mixed[(c, b)] - base[(c, b)]
        return diff, mixed, base

    def graph_problem(self) -> str | None:
        """None when a small mixed step captures as a CUDA graph, else why it did not."""
        try:
            self._time(
                [(min(self.grids.chunk_sizes), min(self.grids.kv_lens), min(self.grids.decode_batches))]
            )
        except RuntimeError as exc:
            return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None
