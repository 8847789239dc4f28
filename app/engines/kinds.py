"""Exposition text of one endpoint -> its ``EngineSample``, by engine kind (pure)."""

from __future__ import annotations

from app.engines import custom, sglang, trtllm, vllm
from app.engines.config import Endpoint
from app.engines.sample import EngineSample, Reader, parse_series

_READERS = {"vllm": vllm.read, "sglang": sglang.read, "trtllm": trtllm.read}
_NAMES = {"vllm": vllm.NAMES, "sglang": sglang.NAMES, "trtllm": trtllm.NAMES}


def read_exposition(text: str, endpoint: Endpoint) -> EngineSample:
    """The signals ``endpoint`` publishes in ``text``.

    ``ExpositionError`` if it is not Prometheus text, ``NoMetrics`` if it holds none of the
    metrics its kind reads.
    """
    if endpoint.kind == "custom":
        names = frozenset(metric for _, metric, _, _ in endpoint.custom)
        return custom.read(Reader(parse_series(text, names)), endpoint.custom)
    return _READERS[endpoint.kind](Reader(parse_series(text, _NAMES[endpoint.kind])))
