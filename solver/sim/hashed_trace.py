"""Reading traces that say what each prompt contains: JSON Lines with block hash ids.

The form is the Mooncake trace's (and the tools that replay it): one JSON object per line,

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` in milliseconds (any origin), ``input_length`` and ``output_length`` in tokens, and
``hash_ids`` one id per ``block_size``-token block of the prompt (512 in the Mooncake traces;
the last id stands for a partial block when the prompt is not a whole number of blocks). Equal
ids at the same position mean the same tokens there and before, as chained block hashes do
(``solver.sim.block_hashes``); a row without ``hash_ids`` shares nothing. Only full blocks are
kept (a cache shares whole blocks), so a prompt of ``L`` tokens keeps ``L // block_size`` ids.

Times are made relative to the earliest request and rows sorted by time (stable). Every
problem raises ``InvalidTrace`` naming the file and the line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from solver.errors import InvalidTrace
from solver.sim.block_hashes import BlockHashes
from solver.sim.workload import MAX_TOKENS_PER_REQUEST, Workload

MOONCAKE_BLOCK_SIZE = 512  # tokens per hash id in the Mooncake traces


def _tokens(row: dict[str, Any], key: str) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_PER_REQUEST:
        raise ValueError(f"{key} must be an integer from 1 to {MAX_TOKENS_PER_REQUEST:,}, got {value!r}")
    return value


def _row(text: str, block_size: int) -> tuple[float, int, int, list[int]]:
    row = json.loads(text)
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    stamp = row.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not np.isfinite(stamp):
        raise ValueError(f"timestamp must be a number of milliseconds, got {stamp!r}")
    prompt, output = _tokens(row, "input_length"), _tokens(row, "output_length")
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise ValueError("hash_ids must be a list of integers")
    if any(not -(2**63) <= h < 2**63 for h in ids):
        raise ValueError("hash_ids must fit in 64 bits")
    return float(stamp), prompt, output, ids[: prompt // block_size]


def read_hashed_trace(path: str | os.PathLike[str], block_size: int = MOONCAKE_BLOCK_SIZE) -> Workload:
    """The requests of a JSON Lines trace with hash ids, as a ``Workload`` with ``blocks``."""
    p = Path(path)
    if block_size < 1:
        raise InvalidTrace(f"block_size: expected an integer >= 1, got {block_size}")
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidTrace(f"{p}: cannot read the trace ({exc})") from None
    rows: list[tuple[float, int, int, list[int]]] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            rows.append(_row(text, block_size))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise InvalidTrace(f"{p}: line {number}: {exc}") from None
    if not rows:
        raise InvalidTrace(f"{p}: no requests")
    stamps = np.array([r[0] for r in rows])
    order = np.argsort(stamps, kind="stable")
    chains = [np.array(rows[i][3], dtype=np.int64) for i in order]
    return Workload(
        (stamps[order] - stamps[order[0]]) / 1000.0,
        np.array([rows[i][1] for i in order], dtype=np.int64),
        np.array([rows[i][2] for i in order], dtype=np.int64),
        source=p.name,
        blocks=BlockHashes.from_chains(chains, block_size),
    )
