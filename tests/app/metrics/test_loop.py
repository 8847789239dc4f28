"""The lock-free histograms and counters expose exactly what prometheus_client's would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.metrics.loop import LoopCounter, LoopHistogram

BUCKETS = (0, 1, 2.5, 4, 16, 1000)


def samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.one_of(st.sampled_from([0.0, 1.0, 2.5, 4.0, 16.0, 1000.0]), st.integers(0, 2000).map(float)),
        ),
        max_size=60,
    )
)
def test_histogram_and_counter_match_prometheus_client(observations: list[tuple[str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    h1 = LoopHistogram("x_seconds", "doc", ["path"], buckets=BUCKETS, registry=ours)
    h2 = Histogram("x_seconds", "doc", ["path"], buckets=BUCKETS, registry=theirs)
    c1 = LoopCounter("y", "doc", ["path"], registry=ours)
    c2 = Counter("y", "doc", ["path"], registry=theirs)
    for label, value in observations:
        h1.labels(path=label).observe(value)
        h2.labels(path=label).observe(value)
        c1.labels(label).inc(value)
        c2.labels(label).inc(value)
    assert samples(ours) == samples(theirs)


def test_unlabelled_histogram_and_label_errors() -> None:
    registry = CollectorRegistry()
    h = LoopHistogram("load", "doc", buckets=(1, 2), registry=registry)
    h.observe(1)
    h.observe(3)
    got = samples(registry)
    assert ("load_bucket", (("le", "1.0"),), 1.0) in got
    assert ("load_bucket", (("le", "+Inf"),), 2.0) in got
    assert ("load_sum", (), 4.0) in got
    labelled = LoopHistogram("lat", "doc", ["path"], buckets=(1,), registry=registry)
    for bad in ((), ("a", "b")):
        with pytest.raises(ValueError, match="expected labels"):
            labelled.labels(*bad)
    with pytest.raises(ValueError, match="expected labels"):
        labelled.labels(other="a")
