"""Trace files: the Azure format, the plain form, and clear errors for bad files."""

from __future__ import annotations

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


def test_azure_columns_in_any_order_and_case(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("generatedtokens,Extra,timestamp,contexttokens\n5,x,2024-01-01 00:00:00,7\n")
    wl = read_trace(path)
    assert (wl.prompt_len.tolist(), wl.output_len.tolist()) == ([7], [5])


@pytest.mark.parametrize("header", ["", "timestamp_s,prompt_tokens,output_tokens\n", "t,p,o\n"])
def test_plain_form_with_or_without_header(tmp_path: Path, header: str) -> None:
    path = tmp_path / "plain.csv"
    path.write_text(header + "10.5,100,20\n11.0,200,30\n\n13,300,1\n")
    wl = read_trace(path)
    assert wl.arrival_s.tolist() == [0.0, 0.5, 2.5]
    assert wl.prompt_len.tolist() == [100, 200, 300]
    assert wl.output_len.tolist() == [20, 30, 1]


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
        ("0,100,10\n1,abc,10\n", r":2: invalid literal"),
        ("0,100,10\n1,0,10\n", r":2: prompt must be >= 1 token"),
        ("0,100,10\n1,100,0\n", r":2: output must be >= 1 token"),
        ("0,100,10\nnan,100,3\n", r":2: timestamp must be finite"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,5,5\n", r":2: not a 'YYYY-MM-DD HH:MM:SS'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 25:00:00,5,5\n", r":2: time out of range"),
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
