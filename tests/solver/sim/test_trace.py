"""Trace files: the Azure format, the plain form, and clear errors for bad files."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from solver.errors import InvalidTrace
from solver.sim import Workload, read_trace, write_trace

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
    "2023-11-16 23:59:59.5000000,374,44\r\n"
    "2023-11-16 23:59:58.2500000,396,109\r\n"
    "2023-11-17 00:00:01.0000001,879,55"  # no final line terminator, as in the public files
)


def test_azure_format(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_bytes(AZURE.encode())
    wl = read_trace(path)
    # Rows are sorted by time and made relative to the first; midnight is crossed.
    assert wl.arrival_s.tolist() == pytest.approx([0.0, 1.25, 2.7500001], abs=1e-9)
    assert wl.prompt_len.tolist() == [396, 374, 879]
    assert wl.output_len.tolist() == [109, 44, 55]
    assert wl.source == "azure.csv"


def test_azure_2024_timestamps_with_a_utc_offset(tmp_path: Path) -> None:
    path = tmp_path / "azure2024.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,100,10\n"
        "2024-05-10 02:00:01.5+02:00,200,20\n"  # 00:00:01.5 UTC
        "2024-05-10T00:00:03Z,300,30\n"
    )
    wl = read_trace(path)
    assert wl.arrival_s.tolist() == pytest.approx([0.0, 1.49007, 2.99007], abs=1e-9)
    assert wl.prompt_len.tolist() == [100, 200, 300]


def test_azure_columns_in_any_order_and_case(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("generatedtokens,Extra,timestamp,contexttokens\n5,x,2024-01-01 00:00:00,7\n")
    wl = read_trace(path)
    assert (wl.prompt_len.tolist(), wl.output_len.tolist()) == ([7], [5])


@pytest.mark.parametrize(
    "header", ["", "timestamp_s,prompt_tokens,output_tokens\n", "t,p,o\n", "timestamp,prompt,output\n"]
)
def test_plain_form_with_or_without_header(tmp_path: Path, header: str) -> None:
    path = tmp_path / "plain.csv"
    path.write_text(header + "10.5,100,20\n11.0,200,30\n\n13,300,1\n")
    wl = read_trace(path)
    assert wl.arrival_s.tolist() == [0.0, 0.5, 2.5]
    assert wl.prompt_len.tolist() == [100, 200, 300]
    assert wl.output_len.tolist() == [20, 30, 1]


def test_rows_out_of_time_order_are_sorted(tmp_path: Path) -> None:
    path = tmp_path / "unsorted.csv"
    path.write_text("5.0,500,50\n1.0,100,10\n3.0,300,30\n1.0,101,11\n")
    wl = read_trace(path)
    assert wl.arrival_s.tolist() == [0.0, 0.0, 2.0, 4.0]
    assert wl.prompt_len.tolist() == [100, 101, 300, 500]  # equal times keep the file's order
    assert wl.output_len.tolist() == [10, 11, 30, 50]


def test_a_long_trace_is_streamed_not_held_as_text(tmp_path: Path) -> None:
    # Holding the text and a list of parsed rows costs about 600 bytes a row; streaming into
    # packed arrays about 80. Deterministic (allocations, not time).
    num_rows = 20_000
    path = tmp_path / "long.csv"
    rows = (
        f"2023-11-16 18:{i // 1000 % 60:02d}:{i % 1000 * 0.06:010.7f},{100 + i % 3000},{1 + i % 500}"
        for i in range(num_rows)
    )
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    tracemalloc.start()
    try:
        wl = read_trace(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert wl.num_requests == num_rows
    assert peak / num_rows < 200, f"{peak / num_rows:.0f} bytes per row"


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    wl = Workload(np.array([0.0, 0.125, 3.0]), np.array([5, 6, 7]), np.array([1, 2, 3]))
    back = read_trace(write_trace(wl, tmp_path / "out" / "t.csv"))
    assert back.arrival_s.tolist() == wl.arrival_s.tolist()
    assert back.prompt_len.tolist() == wl.prompt_len.tolist()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty trace"),
        ("\n\n", "empty trace"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests after the header"),
        ("when,what\n1,2\n", "unrecognised header"),
        ("1.0,100\n", r":1: expected 3 fields, got 2"),
        ("0,100,10\n1,abc,10\n", r":2: prompt tokens: expected a whole number, got 'abc'"),
        ("0,100,10\n1,100.5,10\n", r":2: prompt tokens: expected a whole number, got '100.5'"),
        ("0,100,10\n1,0,10\n", r":2: prompt tokens must be >= 1, got 0"),
        ("0,100,10\n1,-7,10\n", r":2: prompt tokens must be >= 1, got -7"),
        ("0,100,10\n1,100,0\n", r":2: output tokens must be >= 1, got 0"),
        ("0,100,10\n1,100,\n", r":2: output tokens: expected a whole number, got ''"),
        # Beyond int64 and beyond any context window: refused on its line, not overflowed.
        ("0,99999999999999999999,10\n", r":1: prompt tokens must be <= 10,000,000"),
        ("0,100,10000001\n", r":1: output tokens must be <= 10,000,000, got 10,000,001"),
        ("0,100,10\nnan,100,3\n", r":2: timestamp must be finite"),
        ("0,100,10\nsoon,100,3\n", r":2: timestamp: expected seconds, got 'soon'"),
        (
            "TIMESTAMP,ContextTokens\n2023-11-16 10:00:00,5\n",
            r":1: Azure header without column GeneratedTokens",
        ),
        ("Timestamp,GeneratedTokens\n1,5\n", r":1: Azure header without column ContextTokens\b"),
        ("timestamp,prompt\n1,5\n", r":1: unrecognised header"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,5,5\n", r":2: not a 'YYYY-MM-DD HH:MM:SS"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 25:00:00,5,5\n", r":2: time out of range"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00,5,5\n",
            r":2: not a 'YYYY-MM-DD HH:MM:SS",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00+1,5,5\n", r":2: not a 'YYYY-MM-DD"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,5\n", r":2: expected 3 fields"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(InvalidTrace, match=message) as err:
        read_trace(path)
    assert str(path) in str(err.value)


def test_missing_directory_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidTrace, match="file not found"):
        read_trace(tmp_path / "nope.csv")
    with pytest.raises(InvalidTrace, match="is a directory"):
        read_trace(tmp_path)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(InvalidTrace, match="not a UTF-8 text file"):
        read_trace(binary)
