"""Both distributions declare their license in the current form (an SPDX expression, PEP 639).

setuptools deprecates the ``{text = ...}`` table (a warning on every install); the SPDX string
needs setuptools 77, which the build requirements state.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", ["pyproject.toml", "clients/python/pyproject.toml"])
def test_the_license_is_an_spdx_expression(path: str) -> None:
    doc = tomllib.loads((ROOT / path).read_text())
    assert doc["project"]["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in doc["project"].get("classifiers", []))
    (setuptools,) = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert match is not None and int(match.group(1)) >= 77
