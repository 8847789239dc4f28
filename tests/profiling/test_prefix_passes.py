"""Passes over a cached prefix (tiny preset, CPU): the cache they leave, and their timings."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
import torch

from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner
from profiling.models import PRESETS
from profiling.prefix_passes import PrefixPasses, num_passes
from tests.profiling.dense_reference import dense_logits

TINY = PRESETS["tiny"]


def _runner() -> ModelRunner:
    """A CPU runner whose weights are large enough that attention is far from uniform (as in
    tests/profiling/test_engine.py), so a wrong mask or position shows in the logits."""
    runner = ModelRunner(TINY, kv_capacity_tokens=256, device="cpu", block_size=4, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in runner.model.named_parameters():
            scale = (1 + 0.2 * torch.randn(p.shape, generator=g)) if name.endswith("norm.weight") else None
            p.copy_(scale if scale is not None else 0.3 * torch.randn(p.shape, generator=g))
    return runner


def _stream(seed: int = 0) -> tuple[list[int], Callable[[int], tuple[int, ...]]]:
    """Tokens handed out in order, and everything handed out so far (the sequence they form)."""
    rng = random.Random(seed)
    given: list[int] = []

    def tokens(n: int) -> tuple[int, ...]:
        new = [rng.randrange(TINY.vocab_size) for _ in range(n)]
        given.extend(new)
        return tuple(new)

    return given, tokens


def _cached(runner: ModelRunner, table: list[int], num_tokens: int) -> Iterator[torch.Tensor]:
    blocks = torch.tensor([table], dtype=torch.int32)
    for layer in range(TINY.num_layers):
        yield from runner.cache.gather(layer, blocks, num_tokens)


@pytest.mark.parametrize("pass_tokens", [1, 5, 8, 100])
def test_a_prefix_filled_in_passes_caches_what_one_forward_does(pass_tokens: int) -> None:
    runner = _runner()
    given, tokens = _stream()
    passes = PrefixPasses(runner, tokens, warmup=0, repeats=1, use_graphs=False)
    table = runner.allocator.allocate(21)
    passes.fill(table, 21, pass_tokens)
    assert len(given) == 21
    whole = runner.allocator.allocate(21)
    runner.forward(runner.prepare([SequenceChunk(tuple(given), 0, tuple(whole))]))
    for got, want in zip(_cached(runner, table, 21), _cached(runner, whole, 21), strict=True):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_a_pass_over_the_prefix_is_the_end_of_the_whole_prompt() -> None:
    # The timed pass attends over the cached prefix: its last logits are the dense model's for
    # the prefix and the chunk together.
    runner = _runner()
    given, tokens = _stream(1)
    passes = PrefixPasses(runner, tokens, warmup=1, repeats=3, use_graphs=False)
    table = runner.allocator.allocate(30)
    passes.fill(table, 22, 8)
    timing = passes.time_pass(table, 22, 8)
    assert len(timing.samples_ms) == 3 and timing.median_ms > 0
    assert len(given) == 30
    logits = runner.forward(runner.prepare([SequenceChunk(tuple(given[22:]), 22, tuple(table))]))
    want = dense_logits(runner.model, given)[-1]
    torch.testing.assert_close(logits[0].double(), want, atol=2e-4, rtol=0)


def test_chunked_prefill_sums_its_passes_and_gives_its_blocks_back() -> None:
    runner = _runner()
    free = runner.allocator.num_free
    _, tokens = _stream()
    timing = PrefixPasses(runner, tokens, warmup=0, repeats=4, use_graphs=False).chunked_prefill(50, 16)
    assert len(timing.samples_ms) == 4 and timing.median_ms > 0
    assert runner.allocator.num_free == free
    assert [num_passes(n, 16) for n in (1, 16, 17, 50)] == [1, 1, 2, 4]
