"""The table of default output lengths by prompt length: lookup edges, the strict parser, JSON."""

from __future__ import annotations

import pytest

from pdroute_core.bounds import MAX_OUTPUT_LEN
from pdroute_core.output_defaults import (
    SETTING,
    InvalidOutputTable,
    OutputLenDefaults,
    format_table,
    parse_table,
)


def test_for_prompt_takes_the_largest_bound_not_above_the_prompt() -> None:
    table = parse_table("1024:340,2048:80", 211)
    assert table.by_prompt == ((1024, 340), (2048, 80))
    got = {n: table.for_prompt(n) for n in (1, 1023, 1024, 1025, 2047, 2048, 2049, 10**7)}
    assert got == {1: 211, 1023: 211, 1024: 340, 1025: 340, 2047: 340, 2048: 80, 2049: 80, 10**7: 80}


def test_a_zero_bound_covers_every_prompt() -> None:
    table = parse_table("0:7,16:9", 211)
    assert [table.for_prompt(n) for n in (1, 15, 16)] == [7, 7, 9]


def test_blank_is_off_and_items_sort() -> None:
    assert parse_table("", 50) == OutputLenDefaults(50)
    assert parse_table("  ", 50).for_prompt(10**6) == 50
    assert parse_table(" 2048:80 , 1024:340 ", 1) == parse_table("1024:340,2048:80", 1)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("abc", "item 'abc' is not min_prompt_len:tokens"),
        ("1024", "item '1024' is not"),
        ("1024:3.5", "item '1024:3.5' is not"),
        ("1024:", "item '1024:' is not"),
        ("1024:340,", "item '' is not"),
        ("1024:0", "item '1024:0': tokens must be in [1, "),
        (f"1024:{MAX_OUTPUT_LEN + 1}", "tokens must be in"),
        ("-1:5", "item '-1:5': min_prompt_len must be in [0, "),
        ("1024:5,8:1,1024:6", "min_prompt_len 1024 given twice"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it_and_the_item(text: str, needle: str) -> None:
    with pytest.raises(InvalidOutputTable) as info:
        parse_table(text, 200)
    message = str(info.value)
    assert message.startswith(SETTING + ": ") and needle in message and "\n" not in message
    assert isinstance(info.value, ValueError)  # pydantic reports it as the setting's error


def test_json_and_text_round_trip() -> None:
    table = parse_table("8192:40,1024:340,2048:80", 200)
    assert table.to_json() == [[1024, 340], [2048, 80], [8192, 40]]
    assert OutputLenDefaults.from_json(200, table.to_json()) == table
    assert parse_table(format_table(table), 200) == table
    assert OutputLenDefaults.from_json(200, []).to_json() == []


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"1024": 3}, "expected a list"),
        ([[1024]], "t[0]: expected [min_prompt_len, tokens] integers"),
        ([[1024, True]], "t[0]: expected"),
        ([[1, 2], [1024, 2.0]], "t[1]: expected"),
        ([[1024, 0]], "t[0]: tokens must be in"),
        ([[2, 1], [2, 3]], "min_prompt_len 2 given twice"),
    ],
)
def test_from_json_is_strict(value: object, needle: str) -> None:
    with pytest.raises(InvalidOutputTable, match=r"^t") as info:
        OutputLenDefaults.from_json(200, value, "t")
    assert needle in str(info.value)


def test_the_dataclass_refuses_unsorted_bounds() -> None:
    with pytest.raises(InvalidOutputTable, match="sorted and distinct"):
        OutputLenDefaults(200, ((2048, 80), (1024, 340)))
