"""The per-bucket output-length correction: identity, exactness, bucket means, window, clip, snapshot."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdroute_core.bounds import MAX_OUTPUT_LEN, MAX_PROMPT_LEN
from pdroute_core.output_learning import (
    NUM_BUCKETS,
    InvalidOutputLearning,
    OutputLearningConfig,
    OutputLenLearner,
    OutputLenSnapshot,
    bucket_of,
)

SMALL = OutputLearningConfig(window=20, min_observations=5, max_ratio=8.0)


@pytest.mark.parametrize(
    ("prompt_len", "bucket"),
    [(1, 0), (2, 1), (3, 1), (4, 2), (1023, 9), (1024, 10), (3000, 11), (MAX_PROMPT_LEN, 24)],
)
def test_bucket_is_floor_log2(prompt_len: int, bucket: int) -> None:
    assert bucket_of(prompt_len) == bucket


def test_buckets_are_bounded() -> None:
    assert NUM_BUCKETS == 25
    assert bucket_of(MAX_PROMPT_LEN * 1000) == NUM_BUCKETS - 1


def test_identity_before_min_observations() -> None:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.min_observations - 1):
        learner.observe(1500, 200, 50)
    assert learner.ratio(1500) == 1.0
    assert learner.corrected(1500, 200) == 200
    learner.observe(1500, 200, 50)
    assert learner.ratio(1500) == 0.25
    assert learner.corrected(1500, 200) == 50
    # Other buckets are untouched.
    assert learner.ratio(500) == 1.0
    assert learner.corrected(3000, 200) == 200


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, MAX_PROMPT_LEN), st.integers(1, 100_000)),
        min_size=1,
        max_size=200,
    ),
    st.integers(1, MAX_PROMPT_LEN),
    st.integers(1, MAX_OUTPUT_LEN),
)
def test_exact_predictions_change_nothing(
    requests: list[tuple[int, int]], prompt_len: int, told_len: int
) -> None:
    learner = OutputLenLearner(OutputLearningConfig(window=50, min_observations=1))
    for p, o in requests:
        learner.observe(p, o, o)
    for p, _ in requests:
        assert learner.ratio(p) == 1.0
    assert learner.corrected(prompt_len, told_len) == told_len
    assert learner.snapshot().corrected(prompt_len, told_len) == told_len


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 2_000), min_size=5, max_size=20),
    st.integers(1, 1_000),
    st.integers(2048, 4095),
)
def test_constant_told_gives_the_bucket_mean(outputs: list[int], told: int, prompt_len: int) -> None:
    learner = OutputLenLearner(OutputLearningConfig(window=20, min_observations=5, max_ratio=1e9))
    for o in outputs:
        learner.observe(prompt_len, told, o)
    mean = sum(outputs) / len(outputs)
    assert learner.corrected(2048, told) == max(1, round(mean))
    stats = learner.snapshot().buckets
    assert len(stats) == 1
    assert stats[0].min_prompt_len == 2048
    assert stats[0].observations == len(outputs)
    assert stats[0].mean_output_tokens == pytest.approx(mean)


def test_removes_a_per_bucket_bias() -> None:
    rng = random.Random(1)
    learner = OutputLenLearner()
    for _ in range(2000):
        short, long = rng.randint(10, 1000), rng.randint(2048, 8000)
        told_short, told_long = rng.randint(50, 500), rng.randint(50, 500)
        learner.observe(short, told_short, told_short * 2)  # short prompts: twice what told
        learner.observe(long, told_long, max(1, told_long // 3))  # long ones: a third
    assert learner.ratio(2048) == pytest.approx(1 / 3, rel=0.02)
    assert learner.corrected(3000, 300) == pytest.approx(100, abs=2)
    for p in (256, 512, 1000):  # buckets with at least min_observations requests
        assert learner.corrected(p, 100) == 200


def test_window_forgets_old_requests() -> None:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.window):
        learner.observe(100, 100, 400)
    assert learner.ratio(100) == 4.0
    for _ in range(SMALL.window - 1):
        learner.observe(100, 100, 50)
    assert learner.ratio(100) == (400 + 50 * (SMALL.window - 1)) / (100 * SMALL.window)
    learner.observe(100, 100, 50)
    assert learner.ratio(100) == 0.5
    assert learner.snapshot().buckets[0].observations == SMALL.window


@pytest.mark.parametrize(("observed", "ratio"), [(10_000, 8.0), (1, 1 / 8)])
def test_ratio_is_clipped(observed: int, ratio: float) -> None:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.min_observations):
        learner.observe(700, 100, observed)
    assert learner.ratio(700) == ratio
    assert learner.corrected(700, 100) == round(100 * ratio)


def test_corrected_stays_in_bounds() -> None:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.min_observations):
        learner.observe(700, 10, 1)  # ratio 0.1
        learner.observe(70, 1, 8)  # ratio 8
    assert learner.corrected(700, 1) == 1
    assert learner.corrected(70, MAX_OUTPUT_LEN) == MAX_OUTPUT_LEN


@pytest.mark.parametrize("args", [(0, 10, 10), (10, 0, 10), (10, 10, 0), (-5, 10, 10), (10, 10, -1)])
def test_non_positive_values_are_ignored(args: tuple[int, int, int]) -> None:
    learner = OutputLenLearner(OutputLearningConfig(window=4, min_observations=1))
    learner.observe(*args)
    assert learner.num_observations == 0
    assert learner.snapshot().buckets == ()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
        ({"window": True}, "window"),
        ({"min_observations": 0}, "min_observations"),
        ({"window": 10, "min_observations": 11}, "min_observations"),
        ({"max_ratio": 0.5}, "max_ratio"),
        ({"max_ratio": float("inf")}, "max_ratio"),
        ({"max_ratio": float("nan")}, "max_ratio"),
        ({"max_ratio": "8"}, "max_ratio"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        OutputLearningConfig(**kwargs)


def test_default_config() -> None:
    c = OutputLearningConfig()
    assert (c.window, c.min_observations, c.max_ratio) == (512, 50, 8.0)


def test_empty_snapshot_is_the_identity() -> None:
    snap = OutputLenSnapshot()
    assert snap.corrected(5000, 211) == 211
    assert snap.ratio(1) == 1.0
    assert snap.to_json() == []


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 70_000), st.integers(1, 3_000), st.integers(1, 3_000)),
        max_size=300,
    ),
    st.lists(st.tuples(st.integers(1, 70_000), st.integers(1, 3_000)), min_size=1, max_size=20),
)
def test_snapshot_equals_learner(
    observations: list[tuple[int, int, int]], queries: list[tuple[int, int]]
) -> None:
    learner = OutputLenLearner(OutputLearningConfig(window=16, min_observations=3, max_ratio=4.0))
    for p, t, o in observations:
        learner.observe(p, t, o)
    snap = learner.snapshot()
    for p, t in queries:
        assert snap.corrected(p, t) == learner.corrected(p, t)
        assert snap.ratio(p) == learner.ratio(p)
    for b in snap.buckets:
        assert b.ratio == learner.ratio(b.min_prompt_len)
    # The snapshot does not move when the learner learns more.
    before = [snap.corrected(p, t) for p, t in queries]
    for p, _ in queries:
        for _ in range(20):
            learner.observe(p, 1, 3_000)
    assert [snap.corrected(p, t) for p, t in queries] == before


def test_snapshot_to_json() -> None:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.min_observations):
        learner.observe(3000, 200, 70)
    learner.observe(10, 50, 60)
    assert learner.snapshot().to_json() == [
        {
            "min_prompt_len": 8,
            "observations": 1,
            "mean_output_tokens": 60.0,
            "ratio": 1.0,
            "observed_tokens": None,  # below min_observations: no sums in force
            "told_tokens": None,
        },
        {
            "min_prompt_len": 2048,
            "observations": 5,
            "mean_output_tokens": 70.0,
            "ratio": 0.35,
            "observed_tokens": 350,
            "told_tokens": 1000,
        },
    ]


def section_of(snap: OutputLenSnapshot) -> dict[str, Any]:
    """The ``/params`` section of a correcting service (as ``app.learners.output_length``), over JSON text."""
    c = snap.config
    section = {
        "mode": "correct",
        "window": c.window,
        "min_observations": c.min_observations,
        "max_ratio": c.max_ratio,
        "observations": 0,
        "unmatched": 0,
        "buckets": snap.to_json(),
    }
    loaded: dict[str, Any] = json.loads(json.dumps(section))
    return loaded


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(st.integers(1, 40), st.integers(1, 40), st.sampled_from([1.0, 1.5, 2.5, 4.0, 8.0, 1e6])),
    st.lists(
        st.tuples(st.integers(1, MAX_PROMPT_LEN), st.integers(1, 5_000), st.integers(1, 5_000)),
        max_size=300,
    ),
    st.lists(
        st.tuples(st.integers(1, MAX_PROMPT_LEN), st.integers(1, MAX_OUTPUT_LEN)), min_size=1, max_size=40
    ),
)
def test_a_snapshot_survives_its_json(
    config: tuple[int, int, float],
    observations: list[tuple[int, int, int]],
    queries: list[tuple[int, int]],
) -> None:
    window, minimum, max_ratio = config
    learner = OutputLenLearner(OutputLearningConfig(max(window, minimum), min(window, minimum), max_ratio))
    for p, t, o in observations:
        learner.observe(p, t, o)
    snap = learner.snapshot()
    back = OutputLenSnapshot.from_json(section_of(snap))
    assert (back.config, back.buckets) == (snap.config, snap.buckets)
    for p, t in [*queries, *((b.min_prompt_len, t) for b in snap.buckets for _, t in queries)]:
        assert back.corrected(p, t) == snap.corrected(p, t) == learner.corrected(p, t)
        assert back.ratio(p) == snap.ratio(p)


def test_the_rebuilt_snapshot_corrects_like_the_learner() -> None:
    learner = OutputLenLearner(SMALL)
    for o in (37, 41, 52, 60, 13):  # 203 observed over 5 x 200 told: 0.203, rounding matters
        learner.observe(3000, 200, o)
    back = OutputLenSnapshot.from_json(section_of(learner.snapshot()))
    assert [back.corrected(3000, t) for t in (1, 2, 3, 200, 333, 1000)] == [1, 1, 1, 41, 68, 203]
    assert back.corrected(1000, 333) == 333  # another bucket: the identity


def good_section() -> dict[str, Any]:
    learner = OutputLenLearner(SMALL)
    for _ in range(SMALL.min_observations):
        learner.observe(3000, 200, 70)
    learner.observe(10, 50, 60)
    return section_of(learner.snapshot())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: [], "output_len_learning: expected an object"),
        (lambda s: {**s, "window": None}, "output_len_learning.window: expected an integer >= 1, got None"),
        (lambda s: {**s, "min_observations": 30}, "output_len_learning.min_observations: expected at most"),
        (lambda s: {**s, "max_ratio": "8"}, "output_len_learning.max_ratio: expected a finite number >= 1"),
        (lambda s: {**s, "buckets": {}}, "output_len_learning.buckets: expected a list"),
        (lambda s: {**s, "buckets": [7]}, "output_len_learning.buckets[0]: expected an object"),
        (
            lambda s: {**s, "buckets": s["buckets"][::-1]},
            "output_len_learning.buckets[1].min_prompt_len: buckets must be sorted and distinct",
        ),
        (
            lambda s: {**s, "buckets": [{**s["buckets"][0], "min_prompt_len": 12}]},
            "output_len_learning.buckets[0].min_prompt_len: expected a power of two in [1, 16777216], got 12",
        ),
        (
            lambda s: {**s, "buckets": [{**s["buckets"][0], "min_prompt_len": [8]}]},
            "output_len_learning.buckets[0].min_prompt_len: expected a power of two",
        ),
        (
            lambda s: {**s, "buckets": [{**s["buckets"][0], "observations": 21}]},
            "output_len_learning.buckets[0].observations: expected an integer in [1, 20], got 21",
        ),
        (
            lambda s: {**s, "buckets": [s["buckets"][0], {**s["buckets"][1], "told_tokens": None}]},
            "output_len_learning.buckets[1].told_tokens: expected an integer >= 1, got None",
        ),
        (
            lambda s: {**s, "buckets": [s["buckets"][0], {**s["buckets"][1], "observed_tokens": 0}]},
            "output_len_learning.buckets[1].observed_tokens: expected an integer >= 1, got 0",
        ),
        (
            lambda s: {**s, "buckets": [s["buckets"][0], {**s["buckets"][1], "observed_tokens": 35.0}]},
            "output_len_learning.buckets[1].observed_tokens: expected an integer >= 1, got 35.0",
        ),
        (  # an older service: a bucket in force without its sums
            lambda s: {
                **s,
                "buckets": [
                    {k: v for k, v in b.items() if k not in ("observed_tokens", "told_tokens")}
                    for b in s["buckets"]
                ],
            },
            "output_len_learning.buckets[1]: observed_tokens and told_tokens missing with 5 observations"
            " (they are given from min_observations, 5)",
        ),
        (
            lambda s: {**s, "buckets": [{**s["buckets"][0], "observed_tokens": 60, "told_tokens": 50}]},
            "output_len_learning.buckets[0]: observed_tokens and told_tokens given with 1 observations",
        ),
        (
            lambda s: {**s, "buckets": [s["buckets"][0], {**s["buckets"][1], "ratio": 0.5}]},
            "output_len_learning.buckets[1].ratio: got 0.5, its sums give 0.35",
        ),
        (
            lambda s: {**s, "buckets": [{**s["buckets"][0], "ratio": float("nan")}]},
            "output_len_learning.buckets[0].ratio: expected a finite number, got nan",
        ),
        (
            lambda s: {**s, "buckets": [s["buckets"][0], {**s["buckets"][1], "mean_output_tokens": 71.0}]},
            "output_len_learning.buckets[1].mean_output_tokens: observed_tokens / observations is 70.0",
        ),
    ],
)
def test_a_bad_section_is_refused_naming_the_field(change: Any, message: str) -> None:
    with pytest.raises(InvalidOutputLearning) as info:
        OutputLenSnapshot.from_json(change(good_section()))
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_a_section_may_carry_more_than_the_snapshot() -> None:
    section = good_section()
    section["buckets"][1]["p90_output_tokens"] = 90  # a later service's extra field
    assert OutputLenSnapshot.from_json(section).corrected(3000, 200) == 70
