"""The KV hand-off over ExampleConnector: the decode engine loads exactly the prefilled blocks."""

from __future__ import annotations

import random

import pytest

from localfleet import BLOCK_SIZE, Fleet
from profiling.sources.engine_api import external_tokens, fresh_prompt, handoff, stream_completion
from tests.real_engines.helpers import by_source, run


@pytest.mark.parametrize("prompt_len", [100, 128, 257])
def test_the_decode_engine_loads_the_prompts_blocks_and_computes_the_rest(
    pd_pair: Fleet, prompt_len: int
) -> None:
    p0, d0 = pd_pair["p0"], pd_pair["d0"]
    prompt = fresh_prompt(random.Random(prompt_len), prompt_len)
    before = by_source(d0.url)
    done = run(lambda c: handoff(c, p0.url, d0.url, "tiny", prompt, 8, BLOCK_SIZE))
    after = by_source(d0.url)
    loaded = after["external_kv_transfer"] - before["external_kv_transfer"]
    computed = after["local_compute"] - before["local_compute"]
    # 100 -> 101 tokens sent, 96 loaded; 128 (a whole number of blocks) -> sent bare, 96 loaded.
    assert done.decode_prompt_len == (prompt_len if prompt_len % BLOCK_SIZE == 0 else prompt_len + 1)
    assert loaded == external_tokens(done.decode_prompt_len, BLOCK_SIZE) > 0
    assert computed == done.decode_prompt_len - loaded
    assert len(done.decode.token_ids) == 8
    assert done.ttft_at_decode_ms > done.prefill.ttft_ms


def test_a_prompt_never_prefilled_elsewhere_is_computed_locally(pd_pair: Fleet) -> None:
    d0 = pd_pair["d0"]
    before = by_source(d0.url)
    run(lambda c: stream_completion(c, d0.url, "tiny", fresh_prompt(random.Random(7), 150), 2))
    after = by_source(d0.url)
    assert after["external_kv_transfer"] == before["external_kv_transfer"]
    assert after["local_compute"] - before["local_compute"] == 150


def test_a_prompt_whose_prefill_engine_died_mid_save_is_computed_locally(pd_pair: Fleet) -> None:
    # The prefill engine writes a prompt's KV layer by layer; killed between two layers it leaves
    # a folder with only some of them. The decode engine must not take that for a saved prompt.
    p0, d0 = pd_pair["p0"], pd_pair["d0"]
    prompt = fresh_prompt(random.Random(4242), 100)
    folders = set(pd_pair.kv_dir.iterdir())
    run(lambda c: stream_completion(c, p0.url, "tiny", prompt, 1))
    (saved,) = set(pd_pair.kv_dir.iterdir()) - folders
    layers = sorted(saved.glob("*.safetensors"))
    assert len(layers) >= 2
    for path in saved.iterdir():  # keep the first layer only, as a save cut short would
        if path != layers[0]:
            path.unlink()
    before = by_source(d0.url)
    done = run(lambda c: stream_completion(c, d0.url, "tiny", prompt, 4))
    after = by_source(d0.url)
    assert len(done.token_ids) == 4
    assert after["external_kv_transfer"] == before["external_kv_transfer"]
    assert after["local_compute"] - before["local_compute"] == 100
    assert d0.is_running()
