"""Reading request traces from CSV files into a ``Workload``.

Two forms are accepted, told apart by the header:

- The Azure LLM inference trace (2023): a header naming ``TIMESTAMP``, ``ContextTokens`` and
  ``GeneratedTokens`` (any order, any case, extra columns ignored); ``TIMESTAMP`` is wall-clock
  text ``YYYY-MM-DD HH:MM:SS[.fffffff]`` (any number of fractional digits; the 2023 files
  carry no time zone), optionally ending in ``Z`` or a UTC offset ``+HH:MM`` (as in the
  2024 files), which is applied.
- A plain form of three columns ``timestamp_s,prompt_tokens,output_tokens``: seconds (any
  origin) then two integers, with or without a header line (a first line whose first field is
  not a number is a header).

Times are made relative to the earliest request; rows are sorted by time (stable), so a file
need not be in time order. Token counts are whole numbers from 1 to
``MAX_TOKENS_PER_REQUEST``. Every problem raises ``InvalidTrace`` naming the file and the
line.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
from array import array
from pathlib import Path

import numpy as np

from solver.errors import InvalidTrace
from solver.sim.workload import MAX_TOKENS_PER_REQUEST, Workload

AZURE_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")
AZURE_NAMES = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


WALLCLOCK_FORM = "YYYY-MM-DD HH:MM:SS[.frac][Z|+HH:MM]"


def _utc_offset_s(time_part: str) -> tuple[str, float]:
    """Split a trailing ``Z`` or ``+HH:MM`` / ``-HH:MM`` off; ``(clock text, offset in s)``."""
    if time_part.endswith(("Z", "z")):
        return time_part[:-1], 0.0
    cut = max(time_part.rfind("+"), time_part.rfind("-"))
    if cut < 0:
        return time_part, 0.0
    sign = -1.0 if time_part[cut] == "-" else 1.0
    digits = time_part[cut + 1 :].replace(":", "")
    if len(digits) not in (2, 4) or not digits.isdigit():
        raise ValueError("bad UTC offset")
    return time_part[:cut], sign * (int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60)


def parse_wallclock(text: str) -> tuple[int, float]:
    """``(day ordinal, seconds into the day, UTC when an offset is given)`` of
    ``YYYY-MM-DD HH:MM:SS[.frac]``, optionally ending in ``Z`` or ``+HH:MM`` (``T`` also
    accepted between date and time). Kept apart because seconds since year 1 as one double
    lose the 100 ns ticks."""
    stripped = text.strip()
    try:
        date_part, sep, time_part = stripped.replace("T", " ").partition(" ")
        if not sep:
            raise ValueError("no time")
        day = dt.date.fromisoformat(date_part).toordinal()
        clock, offset_s = _utc_offset_s(time_part.strip())
        hh, mm, ss = clock.split(":")
        hours, minutes, seconds = int(hh), int(mm), float(ss)
    except ValueError:
        raise ValueError(f"not a '{WALLCLOCK_FORM}' timestamp: {text!r}") from None
    if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 61):
        raise ValueError(f"time out of range: {text!r}")
    return day, hours * 3600 + minutes * 60 + seconds - offset_s


def _count(text: str, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{what} tokens: expected a whole number, got {text.strip()!r}") from None
    if value < 1:
        raise ValueError(f"{what} tokens must be >= 1, got {value}")
    if value > MAX_TOKENS_PER_REQUEST:
        raise ValueError(f"{what} tokens must be <= {MAX_TOKENS_PER_REQUEST:,}, got {value:,}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"timestamp: expected seconds, got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"timestamp must be finite, got {text.strip()!r}")
    return value


def _layout(p: Path, line: int, first: list[str]) -> tuple[list[int], bool, bool]:
    """``(columns of time, prompt, output; is Azure; first row is a header)`` from the first row."""
    header = [h.strip().lower() for h in first]
    if all(c in header for c in AZURE_COLUMNS):
        return [header.index(c) for c in AZURE_COLUMNS], True, True
    if any(c in header for c in AZURE_COLUMNS[1:]):  # names only the Azure form uses
        missing = [name for c, name in zip(AZURE_COLUMNS, AZURE_NAMES, strict=True) if c not in header]
        raise InvalidTrace(f"{p}:{line}: Azure header without column {', '.join(missing)}")
    if first and _is_number(first[0]):
        return [0, 1, 2], False, False
    if len(first) == 3:
        return [0, 1, 2], False, True
    raise InvalidTrace(
        f"{p}:{line}: unrecognised header {first!r}; expected TIMESTAMP,ContextTokens,"
        "GeneratedTokens (Azure) or timestamp_s,prompt_tokens,output_tokens"
    )


def read_trace(path: str | os.PathLike[str]) -> Workload:
    """Read a trace CSV (Azure or plain form, see the module docstring) into a ``Workload``.

    The file is streamed row by row into packed arrays (32 bytes a request), so a trace of
    millions of rows needs memory for its numbers, not for its text.
    """
    p = Path(path)
    if not p.exists():
        raise InvalidTrace(f"{p}: file not found")
    if p.is_dir():
        raise InvalidTrace(f"{p}: is a directory, not a trace file")
    times, days = array("d"), array("q")
    prompts, outputs = array("q"), array("q")
    layout: tuple[list[int], bool, bool] | None = None
    line = 0
    try:
        with p.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            for row in reader:
                line = reader.line_num
                if not any(row):
                    continue
                if layout is None:
                    layout = _layout(p, line, row)
                    if layout[2]:
                        continue
                cols, is_azure, _ = layout
                if len(row) < max(cols) + 1 or (not is_azure and len(row) != 3):
                    expected = max(cols) + 1 if is_azure else 3
                    raise InvalidTrace(f"{p}:{line}: expected {expected} fields, got {len(row)}")
                t_text, p_text, o_text = (row[c] for c in cols)
                try:
                    day, t = parse_wallclock(t_text) if is_azure else (0, _seconds(t_text))
                    prompts.append(_count(p_text, "prompt"))
                    outputs.append(_count(o_text, "output"))
                except ValueError as exc:
                    raise InvalidTrace(f"{p}:{line}: {exc}") from None
                times.append(t)
                days.append(day)
    except UnicodeDecodeError:
        raise InvalidTrace(f"{p}: not a UTF-8 text file") from None
    except csv.Error as exc:
        raise InvalidTrace(f"{p}:{line + 1}: not CSV ({exc})") from None
    except OSError as exc:
        raise InvalidTrace(f"{p}: cannot read ({exc.strerror})") from None
    if layout is None:
        raise InvalidTrace(f"{p}: empty trace")
    if not times:
        raise InvalidTrace(f"{p}: no requests after the header")
    day_arr = np.frombuffer(days, dtype=np.int64)
    t_arr = (day_arr - day_arr.min()).astype(np.float64) * 86400.0 + np.frombuffer(times, dtype=np.float64)
    order = np.argsort(t_arr, kind="stable")
    t_arr = t_arr[order]
    return Workload(
        arrival_s=t_arr - t_arr[0],
        prompt_len=np.frombuffer(prompts, dtype=np.int64)[order],
        output_len=np.frombuffer(outputs, dtype=np.int64)[order],
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
