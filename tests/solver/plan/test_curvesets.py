"""The curve-set dataclass and its JSON form (solver/plan/curvesets.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from solver.errors import InvalidCurves
from solver.plan.curvesets import (
    DEFAULT_DOMAIN_FACTOR,
    builtin_curve_set_names,
    curve_set_from_mapping,
    curve_set_to_mapping,
    load_builtin_curve_set,
    load_curve_set,
    resolve_curve_set,
)
from tests.solver.plan.curve_factory import make_curve_set


def _mapping() -> dict[str, Any]:
    return curve_set_to_mapping(make_curve_set())


def test_mapping_round_trips() -> None:
    curves = make_curve_set()
    assert curve_set_from_mapping(json.loads(json.dumps(curve_set_to_mapping(curves)))) == curves


def test_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "set.json"
    path.write_text(json.dumps(_mapping()))
    assert load_curve_set(path) == make_curve_set()
    assert resolve_curve_set(str(path)) == make_curve_set()


def test_builtin_sets_are_listed_and_load() -> None:
    names = builtin_curve_set_names()
    assert {"bloom-176b-8xh100", "llama2-70b-8xh100"} <= set(names)
    for name in names:
        curves = load_builtin_curve_set(name)
        assert curves.name == name
        assert resolve_curve_set(name) == curves


def test_unknown_builtin_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidCurves, match=r"unknown built-in curve set 'nope'.*bloom-176b-8xh100"):
        load_builtin_curve_set("nope")
    with pytest.raises(InvalidCurves, match="neither a built-in set"):
        resolve_curve_set("no-such-set-or-file.json")


def test_default_domain_is_a_multiple_of_the_largest_batch() -> None:
    curves = make_curve_set(prefill_max_batch=None)
    assert curves.prefill.domain_max() == DEFAULT_DOMAIN_FACTOR * 10000  # largest throughput batch
    assert make_curve_set().prefill.domain_max() == 1e6


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("memory_gb",), _DELETE, "memory_gb: missing"),
        (("memory_gb",), "640", "memory_gb: expected a number"),
        (("weights_gb",), -1.0, "weights_gb: must be > 0"),
        (("schema_version",), 2, "schema_version: unsupported version 2"),
        (("schema_version",), "1", "schema_version: expected an integer"),
        (("prefill", "batch_unit"), "requests", "prefill.batch_unit: must be 'tokens'"),
        (("decode", "max_batch"), 0, r"decode.max_batch: must be in \(0, 1e\+12\]"),
        (("prefill", "max_batch"), 1e300, r"prefill.max_batch: must be in \(0, 1e\+12\]"),
        (("prefill", "throughput", "points"), [[1, 10.0]], "prefill.throughput.points: need at least 2"),
        (("prefill", "throughput", "points"), [[1, 0.0], [2, 0.0]], "never reaches a positive throughput"),
        (("decode", "throughput", "points"), [[1, 5.0], [2, -1.0]], r"throughput.points\[1\]: throughput"),
        (("decode", "throughput", "points"), [[1, 5.0], [1, 6.0], [2, 7.0]], "batches must be distinct"),
        (("decode", "capacity", "points"), [[0, 5.0], [1, 6.0]], r"points\[0\]: batch must be in \(0,"),
        (("decode", "capacity", "points"), [[1, 5.0], [1e300, 6.0]], r"points\[1\]: batch must be in"),
        (("decode", "throughput", "points"), [[1, 1e308], [2, 6.0]], r"points\[0\]: throughput must be"),
        (("prefill", "capacity", "points"), [[1, 5.0], [2, 1e13]], r"points\[1\]: capacity must be"),
        (("decode", "capacity", "points"), [[1, 5.0], [1, 6.0]], "at least 2 distinct batches"),
        (("decode", "capacity", "points"), [[1, 5.0, 3], [2, 6.0]], "expected a \\[batch, value\\] pair"),
        (("decode", "capacity", "points"), [[1, None], [2, 6.0]], r"points\[0\]\[1\]: expected a number"),
        (("decode", "capacity"), _DELETE, "decode.capacity: expected an object"),
        (("assumptions",), "one line", "assumptions: expected a list"),
    ],
)
def test_invalid_sets_name_the_field(path: tuple[Any, ...], value: Any, message: str) -> None:
    with pytest.raises(InvalidCurves, match=message):
        curve_set_from_mapping(_set(_mapping(), path, value))


def test_unreadable_files_are_invalid_curves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidCurves, match="unreadable curve-set JSON"):
        load_curve_set(bad)
    with pytest.raises(InvalidCurves, match="no such curve-set file"):
        load_curve_set(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(_set(_mapping(), ("memory_gb",), _DELETE)))
    with pytest.raises(InvalidCurves, match=r"wrong.json: memory_gb: missing"):
        load_curve_set(wrong)


def test_builtin_sets_are_read_once_per_process() -> None:
    name = builtin_curve_set_names()[0]
    first = load_builtin_curve_set(name)
    assert load_builtin_curve_set(name) is first
    assert builtin_curve_set_names() is builtin_curve_set_names()
