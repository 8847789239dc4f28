"""Exposition text of one endpoint -> its ``EngineSample``, by engine kind (pure)."""

from __future__ import annotations

from app.engines import custom, sglang, trtllm, vllm
from app.engines.config import Endpoint
from app.engines.sample import EngineSample, Reader, parse_series

_READERS = {"vllm": vllm.read, "sglang": sglang.read, "trtllm": trtllm.read}


def read_exposition(text: str, endpoint: Endpoint) -> EngineSample:
    """The signals ``endpoint`` publishes in ``text``; ``ExpositionError`` if it is not Prometheus text."""
    reader = Reader(parse_series(text))
    if endpoint.kind == "custom":
        return custom.read(reader, endpoint.custom)
    return _READERS[endpoint.kind](reader)
