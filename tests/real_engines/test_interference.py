"""On the 1024 x 8 model, a long prompt prefilled beside running decodes slows them several-fold.

The ratio of the decodes' step while the prompt's chunk runs to their step just before, on
one collocated engine; ratios only (absolute times depend on the machine's load).
"""

from __future__ import annotations

import random
import statistics

import httpx

from localfleet import Engine
from profiling.sources.engine_api import discover
from profiling.sources.live_measure import Engine as Measured
from profiling.sources.live_measure import interference_samples
from tests.real_engines.helpers import run


def test_a_long_collocated_prefill_slows_the_running_decodes(heavy_engine: Engine) -> None:
    async def measure(client: httpx.AsyncClient) -> tuple[float, float]:
        info = await discover(client, heavy_engine.url)
        engine = Measured(client, info.url, info.model, 32000, info.max_model_len or 4096, random.Random(5))
        short = await interference_samples(engine, 64, 6, 64, 2, lambda: None)
        long = await interference_samples(engine, 2000, 6, 64, 2, lambda: None)
        ratio = statistics.median(s.mixed_ms / s.baseline_ms for s in long)
        short_ratio = statistics.median(s.mixed_ms / s.baseline_ms for s in short)
        return ratio, short_ratio

    long_ratio, short_ratio = run(measure)
    print(
        f"\nheavy, 6 decodes: step x{long_ratio:.1f} beside 2000 prompt tokens, x{short_ratio:.2f} beside 64"
    )
    assert long_ratio > 3.0  # a 2,000-token chunk in the step (about 1.5 s against ~20 ms here)
    assert long_ratio > 2 * short_ratio  # and the slowdown grows with the chunk
