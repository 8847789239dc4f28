"""The live engine's chunk-over-prefix measurement and KV capacity: the pure parts."""

from __future__ import annotations

import dataclasses
import random

import pytest

from profiling.sources.engine_api import EngineAPIError, EngineInfo, parse_metrics
from profiling.sources.live_engine import LIVE_QUICK_GRIDS, LiveProfileRequest, num_samples
from profiling.sources.live_prefix import (
    cacheable_tokens,
    check_chunk_prefix_grid,
    check_hits,
    chunk_prefix_prompts,
)
from tests.app.engines.expositions import vllm_text


def _info(max_model_len: int | None = 4096, config: dict[str, str] | None = None) -> EngineInfo:
    labels = {
        "block_size": "16",
        "num_gpu_blocks": "27000",
        "enable_prefix_caching": "True",
        **(config or {}),
    }
    return EngineInfo("http://e", "m", "0.11.0", max_model_len, labels, "vllm")


def test_kv_capacity_is_blocks_times_block_size_from_vllms_cache_config() -> None:
    samples = parse_metrics(vllm_text())
    config = samples["vllm:cache_config_info"][0][0]
    info = EngineInfo("http://e", "m", None, 4096, dict(config), "vllm")
    assert info.kv_capacity_tokens == int(config["num_gpu_blocks"]) * int(config["block_size"])
    assert _info().kv_capacity_tokens == 27000 * 16


@pytest.mark.parametrize(
    ("labels", "tokens"),
    [
        ({"num_gpu_blocks": "None", "kv_cache_size_tokens": "65536"}, 65536),  # the pool's own count
        ({"num_gpu_blocks": "None"}, None),
        ({"num_gpu_blocks": "0"}, None),
    ],
)
def test_kv_capacity_falls_back_to_the_pool_size_or_none(labels: dict[str, str], tokens: int | None) -> None:
    assert _info(config=labels).kv_capacity_tokens == tokens


def test_the_second_prompt_starts_with_the_first() -> None:
    prefix, whole = chunk_prefix_prompts(random.Random(0), 48, 16, 1000)
    assert len(prefix) == 48 and len(whole) == 64 and whole[:48] == prefix
    again, _ = chunk_prefix_prompts(random.Random(1), 48, 16, 1000)
    assert again != prefix  # fresh each sample: no earlier sample's blocks are reused


@pytest.mark.parametrize(("prefix", "cached"), [(512, 512), (500, 496), (15, 0)])
def test_only_whole_blocks_are_cacheable(prefix: int, cached: int) -> None:
    assert cacheable_tokens(prefix, 16) == cached


def test_a_prefix_not_served_from_the_cache_is_refused() -> None:
    check_hits(512, 512, 16, "chunk_prefix/512x64")
    check_hits(None, 512, 16, "chunk_prefix/512x64")  # not published: recorded as unverified
    with pytest.raises(EngineAPIError, match=r"chunk_prefix/512x64: the engine served 0 of the prefix's 512"):
        check_hits(0, 512, 16, "chunk_prefix/512x64")


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (_info(config={"block_size": "x"}), "no block_size"),
        (_info(config={"enable_prefix_caching": "False"}), "prefix caching is off"),
        (_info(max_model_len=2048), r"needs 2305 positions but the engine's max_model_len is 2048"),
    ],
)
def test_grids_the_engine_cannot_measure_are_refused(info: EngineInfo, message: str) -> None:
    with pytest.raises(EngineAPIError, match=message):
        check_chunk_prefix_grid(info, (256, 2048), (64, 256))


def test_the_grid_check_gives_the_block_size_and_the_bar_counts_the_samples() -> None:
    assert check_chunk_prefix_grid(_info(), (256, 2048), (64, 256)) == 16
    plain = LiveProfileRequest("http://e", LIVE_QUICK_GRIDS)
    with_prefix = LiveProfileRequest(
        "http://e", dataclasses.replace(LIVE_QUICK_GRIDS, prefix_lens=(256, 512))
    )
    extra = 2 * len(LIVE_QUICK_GRIDS.chunk_sizes) * LIVE_QUICK_GRIDS.repeats
    assert num_samples(with_prefix) == num_samples(plain) + extra
