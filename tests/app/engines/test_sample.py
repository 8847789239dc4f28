"""Parsing exposition text and reading summed gauges."""

from __future__ import annotations

import pytest

from app.engines.sample import ExpositionError, Reader, add, parse_series


@pytest.mark.parametrize(
    "garbage",
    ["<html><body>502 Bad Gateway</body></html>", "metric{label=unterminated 1\n", "a b c d e\n"],
)
def test_garbage_is_not_exposition_text(garbage: str) -> None:
    with pytest.raises(ExpositionError):
        parse_series(garbage)


def test_total_sums_matching_series_and_refuses_bad_values() -> None:
    r = Reader(parse_series('x{a="1"} 2\nx{a="2"} 3\ny -1\n'))
    assert r.total("x") == 5.0
    assert r.total("x", {"a": "2"}) == 3.0
    assert r.total("x", {"a": "3"}) is None
    assert r.total("absent") is None
    assert r.total("y") is None
    assert r.problems == ["y = -1.0"]


def test_setting_must_agree_across_series() -> None:
    r = Reader(parse_series('b{e="0"} 16\nb{e="1"} 16\nc{e="0"} 16\nc{e="1"} 32\n'))
    assert r.setting("b") == 16.0
    assert r.setting("c") is None
    assert r.problems


def test_add_known_values() -> None:
    assert add(None, None) is None
    assert add(1.0, None, 2.0) == 3.0
