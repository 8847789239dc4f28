"""The paged forward against a dense float64 reference, and its prefill/decode/mixed consistency."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch

from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner, build_model, resolve_device, resolve_dtype
from profiling.errors import CheckpointError, DeviceUnavailable, ProfilingError
from profiling.models import PRESETS, ModelConfig, RopeScaling
from tests.profiling.dense_reference import dense_logits

TINY = PRESETS["tiny"]
# Variants covering every switch of the architecture: Llama-style (no q/k norm, GQA 4:1, llama3
# rope scaling with a short original context so that it changes the frequencies), Qwen2-style
# q/k/v biases with tied embeddings, and plain multi-head attention.
VARIANTS = {
    "qwen3-like": TINY,
    "llama-like": dataclasses.replace(
        TINY, num_q_heads=8, num_kv_heads=2, has_qk_norm=False, rope_scaling=RopeScaling(4.0, 1.0, 4.0, 64)
    ),
    "qwen2-like": dataclasses.replace(TINY, has_qk_norm=False, attention_bias=True, tie_word_embeddings=True),
    "mha": dataclasses.replace(TINY, num_kv_heads=4),
}
ATOL = 2e-4  # float32 engine vs float64 reference; logits are O(1)


def _runner(config: ModelConfig = TINY, *, block_size: int = 4, seed: int = 0) -> ModelRunner:
    """A CPU runner whose weights are large enough that attention is far from uniform."""
    runner = ModelRunner(config, kv_capacity_tokens=512, device="cpu", block_size=block_size, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in runner.model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return runner


def _tokens(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(TINY.vocab_size) for _ in range(n)]


def _prefill(runner: ModelRunner, ids: list[int], table: tuple[int, ...] | None = None) -> torch.Tensor:
    table = table or tuple(runner.allocator.allocate(len(ids)))
    return runner.forward(runner.prepare([SequenceChunk(tuple(ids), 0, table)]))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_paged_prefill_matches_dense_reference(name: str) -> None:
    runner = _runner(VARIANTS[name])
    ids = _tokens(23)
    logits = _prefill(runner, ids)[0].double()
    reference = dense_logits(runner.model, ids)
    assert logits.abs().max() > 1.0  # the check below is not comparing near-zero vectors
    torch.testing.assert_close(logits, reference[-1], atol=ATOL, rtol=1e-4)
    # The comparison is sharp enough to see a one-token shift of the context.
    assert (logits - dense_logits(runner.model, ids[1:])[-1]).abs().max() > 100 * ATOL


def test_batched_prefills_of_different_lengths_match_each_alone() -> None:
    runner = _runner()
    prompts = [_tokens(n, seed=n) for n in (5, 17, 9)]
    chunks = [SequenceChunk(tuple(p), 0, tuple(runner.allocator.allocate(len(p)))) for p in prompts]
    logits = runner.forward(runner.prepare(chunks)).double()
    for row, p in zip(logits, prompts, strict=True):
        torch.testing.assert_close(row, dense_logits(runner.model, p)[-1], atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_decode_after_prefill_matches_prefilling_the_longer_sequence(name: str) -> None:
    runner = _runner(VARIANTS[name])
    ids = _tokens(14)
    table = tuple(runner.allocator.allocate(len(ids) + 3))
    _prefill(runner, ids[:11], table)
    for n in range(11, 14):  # three decode steps, crossing a block boundary (block size 4)
        step = runner.prepare([], [SequenceChunk((ids[n],), n, table)])
        decoded = runner.forward(step)[0]
        fresh = _runner(VARIANTS[name])  # same seeds: same weights, empty cache
        torch.testing.assert_close(decoded, _prefill(fresh, ids[: n + 1])[0], atol=ATOL, rtol=1e-4)


def test_decode_batch_with_different_context_lengths() -> None:
    runner = _runner()
    prompts = [_tokens(n, seed=n) for n in (3, 10, 6)]
    tables = []
    for p in prompts:
        tables.append(tuple(runner.allocator.allocate(len(p) + 1)))
        _prefill(runner, p, tables[-1])
    nxt = [7, 8, 9]
    step = runner.prepare(
        [], [SequenceChunk((t,), len(p), tb) for p, t, tb in zip(prompts, nxt, tables, strict=True)]
    )
    assert step.decode is not None and step.decode.mask is not None
    logits = runner.forward(step).double()
    for row, p, t in zip(logits, prompts, nxt, strict=True):
        torch.testing.assert_close(row, dense_logits(runner.model, [*p, t])[-1], atol=ATOL, rtol=1e-4)


def test_chunked_prefill_matches_one_prefill() -> None:
    runner = _runner()
    ids = _tokens(21)
    table = tuple(runner.allocator.allocate(len(ids)))
    _prefill(runner, ids[:8], table)
    second = runner.prepare([SequenceChunk(tuple(ids[8:]), 8, table)])
    assert second.prefills[0].mask is not None
    torch.testing.assert_close(
        runner.forward(second)[0].double(), dense_logits(runner.model, ids)[-1], atol=ATOL, rtol=1e-4
    )


def test_mixed_step_matches_separate_prefill_and_decode() -> None:
    runner = _runner()
    contexts = [_tokens(n, seed=50 + n) for n in (6, 9)]
    tables = []
    for c in contexts:
        tables.append(tuple(runner.allocator.allocate(len(c) + 1)))
        _prefill(runner, c, tables[-1])
    prompt = _tokens(12, seed=99)
    decodes = [SequenceChunk((5,), len(c), t) for c, t in zip(contexts, tables, strict=True)]
    pre = SequenceChunk(tuple(prompt), 0, tuple(runner.allocator.allocate(len(prompt))))
    mixed = runner.forward(runner.prepare([pre], decodes))
    assert mixed.shape == (3, TINY.vocab_size)
    separate_prefill = runner.forward(runner.prepare([pre]))
    separate_decode = runner.forward(runner.prepare([], decodes))
    torch.testing.assert_close(mixed[:1], separate_prefill, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed[1:], separate_decode, atol=1e-5, rtol=1e-5)


def test_virtual_decodes_sharing_a_block_table_give_identical_rows() -> None:
    runner = _runner()
    ids = _tokens(9)
    table = tuple(runner.allocator.allocate(10))
    _prefill(runner, ids, table)
    logits = runner.forward(runner.prepare([], [SequenceChunk((4,), 9, table)] * 5))
    assert logits.shape == (5, TINY.vocab_size)
    torch.testing.assert_close(logits, logits[:1].expand(5, -1))


def test_random_weights_are_seeded() -> None:
    def first_weight(seed: int) -> torch.Tensor:
        return build_model(
            TINY, torch.device("cpu"), torch.float32, seed=seed, checkpoint=None
        ).lm_head.weight

    assert torch.equal(first_weight(3), first_weight(3))
    assert not torch.equal(first_weight(3), first_weight(4))


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    source = _runner(VARIANTS["qwen2-like"], seed=1)
    state = {k: v.contiguous() for k, v in source.model.state_dict().items() if k != "lm_head.weight"}
    half = len(state) // 2
    keys = sorted(state)
    save_file({k: state[k] for k in keys[:half]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({k: state[k] for k in keys[half:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    loaded = ModelRunner(
        VARIANTS["qwen2-like"], kv_capacity_tokens=64, block_size=4, seed=7, checkpoint=tmp_path
    )
    ids = _tokens(8)
    torch.testing.assert_close(_prefill(loaded, ids), _prefill(source, ids))


def test_incomplete_or_mismatched_checkpoint_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        build_model(TINY, torch.device("cpu"), torch.float32, seed=0, checkpoint=tmp_path)
    state = dict(_runner().model.state_dict())
    save_file({"model.norm.weight": state["model.norm.weight"]}, str(tmp_path / "a.safetensors"))
    with pytest.raises(CheckpointError, match="tensors missing"):
        build_model(TINY, torch.device("cpu"), torch.float32, seed=0, checkpoint=tmp_path)
    save_file({"model.norm.weight": torch.ones(3)}, str(tmp_path / "a.safetensors"))
    with pytest.raises(CheckpointError, match="shape"):
        build_model(TINY, torch.device("cpu"), torch.float32, seed=0, checkpoint=tmp_path)
    (tmp_path / "a.safetensors").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match=r"a\.safetensors: not a readable safetensors file \(.+\)$"):
        build_model(TINY, torch.device("cpu"), torch.float32, seed=0, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="not a directory"):
        build_model(TINY, torch.device("cpu"), torch.float32, seed=0, checkpoint=tmp_path / "a.safetensors")


def test_device_and_dtype_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("fp16", torch.device("cpu")) == torch.float16
    with pytest.raises(ProfilingError, match="unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DeviceUnavailable, match="CUDA was requested"):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailable, match="unknown device"):
        resolve_device("gpu0")


def test_bad_runner_options_are_refused() -> None:
    with pytest.raises(ProfilingError, match="attention backend"):
        ModelRunner(TINY, kv_capacity_tokens=64, attention="xformers")
    with pytest.raises(ProfilingError, match="flash-attn"):
        ModelRunner(TINY, kv_capacity_tokens=64, attention="flash-attn")  # CPU: never usable
    runner = ModelRunner(TINY, kv_capacity_tokens=16, block_size=4)
    with pytest.raises(ProfilingError, match="KV cache full"):
        runner.prepare_prompt(list(range(17)))
    with pytest.raises(ProfilingError, match="one token"):
        runner.prepare([], [SequenceChunk((1, 2), 0, (0,))])
    with pytest.raises(ProfilingError, match="cannot hold"):
        runner.prepare([SequenceChunk(tuple(range(9)), 0, (0, 1))])
