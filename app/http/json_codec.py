"""JSON bytes for the per-request answers (``/route``, ``/route/batch``): orjson.

orjson serialises a ``/route`` answer in about a third of pydantic-core's time. Numbers are
written as pydantic-core writes them (the shortest form that reads back to the same double;
``tests/app/http/test_json_codec.py`` compares both on random answers), so the wire format is the
same; a non-finite float becomes ``null`` (valid JSON) where pydantic-core writes ``Infinity``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

# A speed exception, kept because it pays (a third of pydantic-core's time, module docstring).
dumps: Callable[[Any], bytes] = orjson.dumps
