"""GPU checks of the engine and the profiler (skipped without CUDA)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from profiling.batch import SequenceChunk
from profiling.engine import ModelRunner
from profiling.measure import run_full_profile
from profiling.models import PRESETS
from profiling.transfer import measure_kv_bandwidth
from solver.profile_result import QUICK_GRIDS
from tests.profiling.dense_reference import dense_logits

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_paged_forward_matches_the_dense_reference() -> None:
    runner = ModelRunner(PRESETS["tiny"], kv_capacity_tokens=256, device="cuda", attention="sdpa")
    assert runner.dtype == torch.bfloat16
    ids = list(range(3, 40))
    table = tuple(runner.allocator.allocate(len(ids) + 1))
    prefill = runner.forward(runner.prepare([SequenceChunk(tuple(ids), 0, table)]))
    reference = dense_logits(runner.model, ids)
    torch.testing.assert_close(prefill[0].double().cpu(), reference[-1], atol=0.05, rtol=0.05)
    decode = runner.forward(runner.prepare([], [SequenceChunk((5,), len(ids), table)]))
    reference = dense_logits(runner.model, [*ids, 5])
    torch.testing.assert_close(decode[0].double().cpu(), reference[-1], atol=0.05, rtol=0.05)


def test_cuda_graph_replay_matches_the_eager_step() -> None:
    runner = ModelRunner(PRESETS["tiny"], kv_capacity_tokens=256, device="cuda")
    table = tuple(runner.allocator.allocate(65))
    prompt = SequenceChunk(tuple(range(16)), 0, tuple(runner.allocator.allocate(16)))
    batch = runner.prepare([prompt], [SequenceChunk((7,), 64, table)] * 4)
    eager = runner.forward(batch).clone()
    replay = runner.capture(batch)
    torch.testing.assert_close(replay(), eager)


def test_bandwidth_between_gpus_or_through_the_host() -> None:
    m = measure_kv_bandwidth(64 << 20, 0, 1, use_cuda=True, warmup=1, repeats=3)
    if torch.cuda.device_count() == 1:
        assert m.transfer_path == "pinned-relay-single-gpu"
    else:
        assert m.transfer_path in ("nvlink", "pcie-p2p", "pinned-relay")
    assert m.bandwidth_gbps > 0


def test_quick_profile_on_cuda() -> None:
    result = run_full_profile("tiny", None, grids=QUICK_GRIDS, device="cuda", progress=False)
    assert result.device["kind"] == "cuda" and result.provenance["cuda_graphs"] == "on"
    assert len(result.T_decode) == len(QUICK_GRIDS.kv_lens) * len(QUICK_GRIDS.batch_sizes)
    assert result.provenance["failed_points"] == []


def test_chunks_over_cached_prefixes_on_cuda() -> None:
    grids = dataclasses.replace(QUICK_GRIDS, prefix_lens=(256, 1024))
    result = run_full_profile(
        "tiny", None, grids=grids, device="cuda", progress=False, prefill_pass_tokens=64
    )
    assert set(result.T_chunk_prefix) == {(p, c) for p in (256, 1024) for c in QUICK_GRIDS.chunk_sizes}
    assert set(result.provenance["chunked_prefill"]) == {"prefill/128"}
    assert result.provenance["failed_points"] == []


def test_a_pass_over_the_prefix_matches_the_dense_reference_on_cuda() -> None:
    runner = ModelRunner(PRESETS["tiny"], kv_capacity_tokens=256, device="cuda")
    ids = list(range(3, 60))
    table = tuple(runner.allocator.allocate(len(ids)))
    runner.forward(runner.prepare([SequenceChunk(tuple(ids[:40]), 0, table)]))
    replay = runner.capture(runner.prepare([SequenceChunk(tuple(ids[40:]), 40, table)]))
    reference = dense_logits(runner.model, ids)
    torch.testing.assert_close(replay()[0].double().cpu(), reference[-1], atol=0.05, rtol=0.05)
