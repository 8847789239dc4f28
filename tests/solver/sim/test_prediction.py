"""The per-bucket means: the service's output table tells every request what bucket-mean does."""

from __future__ import annotations

import numpy as np

from solver.sim.prediction import OutputPrediction, bucket_means, output_table
from solver.sim.workload import Workload


def workload(prompts: list[int], outputs: list[int]) -> Workload:
    n = len(prompts)
    return Workload(
        np.arange(n, dtype=np.float64), np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)
    )


def test_bucket_means_by_power_of_two() -> None:
    wl = workload([1, 3, 2, 1023, 512, 1024, 4000], [10, 20, 31, 100, 201, 5, 7])
    bucket, means, counts = bucket_means(wl)
    assert bucket.tolist() == [0, 1, 1, 9, 9, 10, 11]
    assert counts.tolist() == [1, 2] + [0] * 7 + [2, 1, 1]
    assert (means[0], means[1], means[9], means[10], means[11]) == (
        10,
        26,
        150,
        5,
        7,
    )  # 25.5 -> 26; 150.5 -> 150


def test_the_table_tells_each_request_its_bucket_mean() -> None:
    rng = np.random.default_rng(3)
    prompts = rng.integers(1, 40_000, 500)
    outputs = rng.integers(1, 900, 500)
    wl = workload(prompts.tolist(), outputs.tolist())
    table = output_table(wl)
    told = OutputPrediction("bucket-mean").predict(wl)
    assert [table.for_prompt(int(p)) for p in prompts] == told.tolist()
    assert table.default == round(float(np.mean(outputs)))
    assert all(bound & (bound - 1) == 0 for bound, _ in table.by_prompt)  # powers of two


def test_an_empty_bucket_has_no_entry() -> None:
    table = output_table(workload([5, 6, 300], [4, 6, 9]))
    assert table.by_prompt == ((4, 5), (256, 9))
