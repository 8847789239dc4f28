"""One engine GPU: decode accounting, chunked prefill, and runs cut by an admission."""

from __future__ import annotations

import pytest

from solver.sim.batching_gpu import MIN_RUN_STEPS, BatchingGpu
from solver.sim.latency import StepLatency
from tests.solver.sim import profiles as P


def engine(latency: StepLatency, prompt: list[int], output: list[int], use_runs: bool) -> BatchingGpu:
    return BatchingGpu(0, latency, 256, prompt, output, use_runs)


def test_decode_steps_use_the_mean_context_and_finish_on_time(latency: StepLatency) -> None:
    gpu = engine(latency, [300, 700], [4, 3], use_runs=False)
    gpu.join_decode(0)
    gpu.join_decode(1)
    t, finished_at = 0.0, {}
    for step in range(1, 4):
        end = gpu.start(t)
        assert end is not None
        # Contexts are prompt + step (one token from the prefill, one per earlier step).
        expected = P.decode_formula_ms((300 + step + 700 + step) / 2, 2) if step <= 2 else None
        if expected is not None:
            assert end - t == pytest.approx(expected, rel=1e-12)
        produced, finished, prefilled, _ = gpu.end_step()
        assert prefilled == []
        assert produced == (2 if step <= 2 else 1)
        finished_at.update({rid: (step, tokens) for rid, tokens in finished})
        t = end
    # Request 1 (3 tokens) leaves after 2 decode steps, request 0 (4 tokens) after 3.
    assert finished_at == {1: (2, 3), 0: (3, 4)}
    assert gpu.start(t) is None and gpu.num_decoding == 0


def test_chunked_prefill_packs_prompts_into_the_budget(latency: StepLatency) -> None:
    gpu = engine(latency, [300, 100], [2, 2], use_runs=False)
    gpu.add_prefill(0)
    gpu.add_prefill(1)
    end = gpu.start(0.0)
    assert end is not None
    assert end == pytest.approx(latency.prefill_ms(256))  # 256 of 300 tokens, alone on the GPU
    assert gpu.end_step()[2] == []
    end2 = gpu.start(end)
    assert end2 is not None
    # The last 44 tokens of prompt 0 and all 100 of prompt 1 share one pass of 144 tokens (plus
    # the 44 tokens' attention over their 256-token prefix): both finish.
    expected = latency.prefill_ms(144) + latency.prefix_attention_ms(256, 44)
    assert end2 - end == pytest.approx(expected)
    assert gpu.end_step()[2] == [0, 1]


def test_the_pending_prompts_mean_prefix_follows_their_chunks(latency: StepLatency) -> None:
    gpu = engine(latency, [300, 100, 600], [2, 2, 2], use_runs=False)
    assert (gpu.pending_prefix_tokens(), gpu.pending_prefill_requests()) == (0.0, 0)
    gpu.add_prefill(0)
    gpu.add_prefill(1)
    gpu.add_prefill(2, cached_tokens=200)  # its first 200 tokens cached: 400 left over them
    # 300 tokens at 150 on average, 100 at 50, 400 at 200 + 200: weighted by the tokens left.
    assert gpu.pending_prefix_tokens() == pytest.approx((300 * 150 + 100 * 50 + 400 * 400) / 800)
    assert gpu.pending_prefill_requests() == 3
    end = gpu.start(0.0)  # 256 of prompt 0: 44 left over 256
    assert end is not None
    gpu.end_step()
    assert gpu.pending_prefix_tokens() == pytest.approx((44 * 278 + 100 * 50 + 400 * 400) / 544)


def test_the_prefill_rate_counts_the_chunks_started_in_the_window(latency: StepLatency) -> None:
    gpu = engine(latency, [300, 100], [2, 2], use_runs=False)
    assert gpu.prefill_tokens_per_s(0.0, 1000.0) == 0.0
    gpu.add_prefill(0)
    gpu.add_prefill(1)
    end = gpu.start(10.0)  # 256 tokens started at 10 ms
    assert end is not None
    gpu.end_step()
    end2 = gpu.start(500.0)  # the last 144 at 500 ms
    assert end2 is not None
    assert gpu.prefill_tokens_per_s(600.0, 1000.0) == pytest.approx(400 / 1.0)
    # Only the past window counts: at 1,200 ms the first chunk (10 ms) has left it.
    assert gpu.prefill_tokens_per_s(1200.0, 1000.0) == pytest.approx(144 / 1.0)
    assert gpu.prefill_tokens_per_s(1600.0, 1000.0) == 0.0


def test_a_cut_run_ends_with_the_step_in_flight(latency: StepLatency) -> None:
    steps = MIN_RUN_STEPS + 20
    single = engine(latency, [512], [steps + 1], use_runs=False)
    runs = engine(latency, [512], [steps + 1], use_runs=True)
    single.join_decode(0)
    runs.join_decode(0)
    ends, t = [], 0.0
    for _ in range(steps):
        end = single.start(t)
        assert end is not None
        single.end_step()
        ends.append(end)
        t = end
    run_end = runs.start(0.0)
    assert run_end == ends[-1] and runs.run_steps == steps
    version = runs.version
    cut_at = (ends[9] + ends[10]) / 2  # during the 11th step
    assert runs.cut_run(cut_at) == ends[10]
    assert runs.step_count == 11 and runs.version == version + 1
    produced, finished, _, _ = runs.end_step()
    assert produced == 11 and finished == []
