"""The four measurements on the tiny preset (CPU): full grids, failures, overrides."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from profiling import measure as measure_module
from profiling.batch import ForwardBatch
from profiling.engine import ModelRunner
from profiling.errors import InvalidModelConfig, ProfilingError
from profiling.models import PRESETS
from profiling.points import PointRecorder
from solver.profile_io import load_profile
from solver.profile_result import ProfileGrids

GRIDS = ProfileGrids(
    prompt_lens=(8, 24),
    kv_lens=(16, 40),
    batch_sizes=(1, 3),
    chunk_sizes=(8, 16),
    decode_batches=(2,),
    interference_kv_len=20,
    warmup=1,
    repeats=2,
)


def _profile(**kwargs: Any) -> Any:
    options = {"grids": GRIDS, "device": "cpu", "progress": False, **kwargs}
    return measure_module.run_full_profile("tiny", None, **options)


def test_every_measurement_fills_its_grid() -> None:
    result = _profile()
    assert set(result.T_prefill) == {8, 24}
    assert set(result.T_decode) == {(16, 1), (16, 3), (40, 1), (40, 3)}
    assert set(result.T_interference) == set(result.T_mixed) == set(result.T_baseline) == {(8, 2), (16, 2)}
    for key, diff in result.T_interference.items():
        assert diff == result.T_mixed[key] - result.T_baseline[key]
    assert all(v > 0 for v in [*result.T_prefill.values(), *result.T_decode.values()])
    names = {"prefill/8", "prefill/24", "decode/16x1", "decode/40x3", "mixed/16x2", "baseline/8x2"}
    assert names <= set(result.samples)
    assert all(len(result.samples[n]) == GRIDS.repeats for n in names)
    assert result.T_prefill[24] == statistics.median(result.samples["prefill/24"])
    assert result.T_decode[(40, 3)] == statistics.median(result.samples["decode/40x3"])
    assert result.transfer_path == "cpu-memcpy (no GPU)" and result.p2p_bandwidth_GBps > 0
    assert result.bytes_per_token == PRESETS["tiny"].bytes_per_token(4)
    assert result.model_config["name"] == "tiny" and result.model_config["dtype"] == "float32"
    assert result.interference_kv_len == 20 and result.grids == GRIDS.to_json_dict()
    assert result.provenance["source"] == "torch-profiler" and result.provenance["failed_points"] == []
    assert result.device["kind"] == "cpu" and result.versions["torch"] == str(torch.__version__)


def test_decode_sequences_share_one_block_table(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ForwardBatch] = []
    forward = ModelRunner.forward

    def spy(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        seen.append(batch)
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", spy)
    _profile()
    decodes = [b.decode for b in seen if b.decode is not None and not b.prefills]
    big = next(d for d in decodes if d.num_seqs == 3 and d.max_context_len == 41)
    assert (big.block_tables == big.block_tables[:1]).all()
    mixed = next(b for b in seen if b.prefills and b.decode is not None)
    assert mixed.prefills[0].num_cached == 0 and mixed.decode is not None
    assert mixed.decode.max_context_len == GRIDS.interference_kv_len + 1


def test_a_failed_point_is_skipped_and_the_rest_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    forward = ModelRunner.forward

    def oom_at_24_tokens(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        if batch.num_tokens == 24:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", oom_at_24_tokens)
    result = _profile()
    assert set(result.T_prefill) == {8}
    assert len(result.T_decode) == 4
    failed = result.provenance["failed_points"]
    assert [f["point"] for f in failed] == ["prefill/24"]
    assert "OutOfMemoryError: CUDA out of memory" in failed[0]["error"]
    err = capsys.readouterr().err
    assert "warning: point prefill/24 failed" in err and "more detail" not in err


def test_a_table_with_no_point_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = ModelRunner.forward

    def no_decodes(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        if batch.decode is not None and not batch.prefills:
            raise RuntimeError("boom")
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", no_decodes)
    with pytest.raises(
        ProfilingError, match=r"no decode point could be measured \(first failure: RuntimeError: boom"
    ):
        _profile()


def test_operator_stated_bandwidth_replaces_the_measurement(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    result = measure_module.run_full_profile(
        "tiny",
        out,
        grids=GRIDS,
        device="cpu",
        progress=False,
        bandwidth_gbps=25.0,
        transfer_path="rdma-network",
    )
    loaded = load_profile(out)
    assert loaded.p2p_bandwidth_GBps == 25.0 == result.p2p_bandwidth_GBps
    assert loaded.transfer_path == "rdma-network"
    assert loaded.provenance["transfer"]["source"] == "operator"
    assert not any(name.startswith("transfer/") for name in loaded.samples)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bandwidth_gbps": 25.0}, "together"),
        ({"transfer_path": "rdma"}, "together"),
        ({"bandwidth_gbps": -1.0, "transfer_path": "rdma"}, "positive"),
        ({"grids": dataclasses.replace(GRIDS, kv_lens=())}, "kv_lens"),
        ({"grids": dataclasses.replace(GRIDS, prompt_lens=(8, 0))}, "prompt_lens"),
        ({"grids": dataclasses.replace(GRIDS, repeats=0)}, "repeats"),
        ({"attention": "bogus"}, "attention backend"),
        (
            {"grids": dataclasses.replace(GRIDS, prompt_lens=(8, 10**8))},
            r"context of 100000000 tokens but tiny supports 4096 \(max_position_embeddings\)",
        ),
        (
            {"grids": dataclasses.replace(GRIDS, chunk_sizes=(4000,), interference_kv_len=96)},
            "context of 4097 tokens",
        ),
        # a 16-token chunk after 4081 cached tokens needs position 4096
        ({"grids": dataclasses.replace(GRIDS, prefix_lens=(4081,))}, "context of 4097 tokens"),
        ({"grids": dataclasses.replace(GRIDS, prefix_lens=(8, 0))}, "prefix_lens"),
        ({"prefill_pass_tokens": 0}, "prefill_pass_tokens"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    options = {"grids": GRIDS, "device": "cpu", "progress": False, **kwargs}
    with pytest.raises(ProfilingError, match=message):
        measure_module.run_full_profile("tiny", None, **options)


def test_unknown_model_is_refused_before_any_work() -> None:
    with pytest.raises(InvalidModelConfig, match="unknown model"):
        measure_module.run_full_profile("gpt-9", None, grids=GRIDS, device="cpu", progress=False)


def test_kv_capacity_covers_the_largest_point() -> None:
    cap = measure_module.kv_capacity_tokens(GRIDS)
    assert cap >= max(24, 40 + 1, 16 + 20 + 1) + 2 * 256


def test_measurements_give_back_every_block() -> None:
    runner = ModelRunner(
        PRESETS["tiny"], kv_capacity_tokens=measure_module.kv_capacity_tokens(GRIDS), block_size=4
    )
    free = runner.allocator.num_free
    measure = measure_module.Measurements(runner, GRIDS, use_graphs=False, seed=0)
    points = PointRecorder(total=1, progress=False)
    assert len(measure.interference(points)[0]) == 2
    assert len(measure.decode(points)) == 4
    assert runner.allocator.num_free == free and points.failed == []


def test_an_unwritable_output_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_build(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was built although the profile could not be saved")

    monkeypatch.setattr(measure_module, "ModelRunner", must_not_build)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ProfilingError, match="cannot write there"):
        measure_module.run_full_profile(
            "tiny", tmp_path / "a-file" / "p.pt", grids=GRIDS, device="cpu", progress=False
        )


def test_running_out_of_memory_while_building_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(*args: Any, **kwargs: Any) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB\nmore detail")

    monkeypatch.setattr(measure_module, "ModelRunner", oom)
    with pytest.raises(ProfilingError) as info:
        _profile()
    message = str(info.value)
    assert message.startswith(
        f"could not build tiny with a KV cache of {measure_module.kv_capacity_tokens(GRIDS)} tokens"
    )
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB)" in message
    assert "\n" not in message


LONG = dataclasses.replace(GRIDS, prefix_lens=(12, 33))


def test_chunks_over_cached_prefixes_fill_their_table() -> None:
    result = _profile(grids=LONG)
    assert set(result.T_chunk_prefix) == {(12, 8), (12, 16), (33, 8), (33, 16)}
    assert result.T_chunk_prefix[(33, 16)] == statistics.median(result.samples["chunk_prefix/33x16"])
    assert len(result.samples["chunk_prefix/12x8"]) == GRIDS.repeats
    assert result.grids["prefix_lens"] == [12, 33]
    assert "chunk_prefix_layout" in result.provenance
    assert result.kv_capacity_tokens is None  # the profiler runs no engine's memory sizing
    assert measure_module.positions_needed(LONG) == 33 + 16


def test_a_chunk_pass_runs_over_its_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    forward = ModelRunner.forward

    def spy(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        if batch.decode is None and len(batch.prefills) == 1:
            seen.append((batch.prefills[0].num_cached, batch.prefills[0].num_tokens))
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", spy)
    _profile(grids=dataclasses.replace(GRIDS, prefix_lens=(33,), chunk_sizes=(8,)))
    # the prefix written once (one untimed pass), then warm-up and timed passes of the chunk
    assert seen.count((0, 33)) == 1
    assert seen.count((33, 8)) == GRIDS.warmup + GRIDS.repeats


def test_design_grids_record_nothing_of_long_context() -> None:
    result = _profile()
    assert result.T_chunk_prefix == {} and "prefix_lens" not in result.grids
    assert "chunk_prefix_layout" not in result.provenance and "chunked_prefill" not in result.provenance


def test_prompts_over_the_pass_size_are_measured_as_chunked_prefill() -> None:
    result = _profile(prefill_pass_tokens=10)
    assert set(result.T_prefill) == {8, 24}
    chunked = result.provenance["chunked_prefill"]
    assert set(chunked) == {"prefill/24"}
    assert chunked["prefill/24"]["pass_tokens"] == 10 and chunked["prefill/24"]["num_passes"] == 3


def test_a_prefill_out_of_memory_in_one_forward_is_measured_in_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from profiling import measurements

    forward = ModelRunner.forward

    def oom_in_one_forward_of_24(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        if batch.num_tokens == 24 and batch.prefills[0].num_cached == 0:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", oom_in_one_forward_of_24)
    monkeypatch.setattr(measurements, "CHUNKED_PREFILL_TOKENS", 16)
    result = _profile()
    assert set(result.T_prefill) == {8, 24} and result.provenance["failed_points"] == []
    entry = result.provenance["chunked_prefill"]["prefill/24"]
    assert entry["pass_tokens"] == 16 and entry["num_passes"] == 2
    assert "out of memory" in entry["why"]


def test_chunks_over_prefixes_give_back_every_block(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = ModelRunner(
        PRESETS["tiny"], kv_capacity_tokens=measure_module.kv_capacity_tokens(LONG), block_size=4
    )
    free = runner.allocator.num_free
    measure = measure_module.Measurements(runner, LONG, use_graphs=False, seed=0)
    points = PointRecorder(total=1, progress=False)
    assert len(measure.chunk_prefix(points)) == 4
    assert runner.allocator.num_free == free and points.failed == []
    forward = ModelRunner.forward

    def oom_in_a_pass(self: ModelRunner, batch: ForwardBatch) -> torch.Tensor:
        if batch.prefills and batch.prefills[0].num_cached == 33:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return forward(self, batch)

    monkeypatch.setattr(ModelRunner, "forward", oom_in_a_pass)
    assert set(measure.chunk_prefix(points)) == {(12, 8), (12, 16)}
    assert [f["point"] for f in points.failed] == ["chunk_prefix/33x8", "chunk_prefix/33x16"]
    assert runner.allocator.num_free == free
