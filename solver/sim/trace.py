"""Reading request traces from CSV files into a ``Workload``.

Two forms are accepted, told apart by the header:

- The Azure LLM inference trace (2023): a header naming ``TIMESTAMP``, ``ContextTokens`` and
  ``GeneratedTokens`` (any order, any case, extra columns ignored); ``TIMESTAMP`` is wall-clock
  text ``YYYY-MM-DD HH:MM:SS[.fffffff]`` (any number of fractional digits; no time zone).
- A plain form of three columns ``timestamp_s,prompt_tokens,output_tokens``: seconds (any
  origin) then two integers, with or without a header line (a first line whose first field is
  not a number is a header).

Times are made relative to the earliest request; rows are sorted by time (stable). Every
problem raises ``InvalidTrace`` naming the file and the line.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
from pathlib import Path

import numpy as np

from solver.errors import InvalidTrace
from solver.sim.workload import Workload

AZURE_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_wallclock(text: str) -> tuple[int, float]:
    """``(day ordinal, seconds into the day)`` of ``YYYY-MM-DD HH:MM:SS[.frac]`` (``T`` also
    accepted). Kept apart because seconds since year 1 as one double lose the 100 ns ticks."""
    stripped = text.strip()
    date_part, sep, time_part = stripped.replace("T", " ").partition(" ")
    if not sep:
        raise ValueError(f"not a 'YYYY-MM-DD HH:MM:SS' timestamp: {text!r}")
    day = dt.date.fromisoformat(date_part).toordinal()
    hh, mm, ss = time_part.split(":")
    hours, minutes, seconds = int(hh), int(mm), float(ss)
    if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 61):
        raise ValueError(f"time out of range: {text!r}")
    return day, hours * 3600 + minutes * 60 + seconds


def _count(text: str, what: str) -> int:
    value = int(text.strip())
    if value < 1:
        raise ValueError(f"{what} must be >= 1 token, got {value}")
    return value


def read_trace(path: str | os.PathLike[str]) -> Workload:
    """Read a trace CSV (Azure or plain form, see the module docstring) into a ``Workload``."""
    p = Path(path)
    if not p.exists():
        raise InvalidTrace(f"{p}: file not found")
    if p.is_dir():
        raise InvalidTrace(f"{p}: is a directory, not a trace file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidTrace(f"{p}: not a UTF-8 text file") from None
    except OSError as exc:
        raise InvalidTrace(f"{p}: cannot read ({exc.strerror})") from None
    rows = [(i + 1, row) for i, row in enumerate(csv.reader(text.splitlines())) if any(row)]
    if not rows:
        raise InvalidTrace(f"{p}: empty trace")
    first_line, first = rows[0]
    header = [h.strip().lower() for h in first]
    if all(c in header for c in AZURE_COLUMNS):
        cols = [header.index(c) for c in AZURE_COLUMNS]
        body, is_azure = rows[1:], True
    elif first and _is_number(first[0]):
        cols, body, is_azure = [0, 1, 2], rows, False
    elif len(first) == 3:
        cols, body, is_azure = [0, 1, 2], rows[1:], False
    else:
        raise InvalidTrace(
            f"{p}:{first_line}: unrecognised header {first!r}; expected TIMESTAMP,ContextTokens,"
            "GeneratedTokens (Azure) or timestamp_s,prompt_tokens,output_tokens"
        )
    if not body:
        raise InvalidTrace(f"{p}: no requests after the header")
    width = max(cols) + 1
    times: list[float] = []
    days: list[int] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for line, row in body:
        if len(row) < width or (not is_azure and len(row) != 3):
            raise InvalidTrace(f"{p}:{line}: expected {3 if not is_azure else width} fields, got {len(row)}")
        t_text, p_text, o_text = (row[c] for c in cols)
        try:
            day, t = parse_wallclock(t_text) if is_azure else (0, float(t_text))
            if not np.isfinite(t):
                raise ValueError(f"timestamp must be finite, got {t_text!r}")
            prompts.append(_count(p_text, "prompt"))
            outputs.append(_count(o_text, "output"))
        except ValueError as exc:
            raise InvalidTrace(f"{p}:{line}: {exc}") from None
        times.append(t)
        days.append(day)
    day_arr = np.asarray(days, dtype=np.int64)
    t_arr = (day_arr - day_arr.min()).astype(np.float64) * 86400.0 + np.asarray(times, dtype=np.float64)
    order = np.argsort(t_arr, kind="stable")
    t_arr = t_arr[order]
    return Workload(
        arrival_s=t_arr - t_arr[0],
        prompt_len=np.asarray(prompts, dtype=np.int64)[order],
        output_len=np.asarray(outputs, dtype=np.int64)[order],
        source=p.name,
    )


def write_trace(workload: Workload, path: str | os.PathLike[str]) -> Path:
    """Write the plain form (``timestamp_s,prompt_tokens,output_tokens`` with a header)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = ["timestamp_s,prompt_tokens,output_tokens"]
    for t, pl, ol in zip(
        workload.arrival_s.tolist(), workload.prompt_len.tolist(), workload.output_len.tolist(), strict=True
    ):
        lines.append(f"{t!r},{pl},{ol}")
    p.write_text("\n".join(lines) + "\n")
    return p
