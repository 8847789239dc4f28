"""``pdroute output-table``: the setting's value of a trace, or one line naming a bad trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.main import main
from app.settings import Settings

TRACE = "timestamp_s,prompt_tokens,output_tokens\n0,100,40\n1,120,60\n2,3000,10\n3,2500,21\n4,9000,8\n"


def test_prints_a_value_the_service_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    assert main(["output-table", "--trace", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "64:50,2048:16,8192:8\n"  # (40+60)/2; (10+21)/2 = 15.5 -> 16 (half to even); 8
    assert "trace-wide mean output length 28" in err  # 139 / 5 = 27.8
    table = Settings(default_output_len_by_prompt=out.strip(), default_output_len=28).output_len_defaults()
    assert [table.for_prompt(n) for n in (100, 3000, 9000, 10)] == [50, 16, 8, 28]


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["output-table", "--trace", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pdroute output-table: error:" in err and "file not found" in err
