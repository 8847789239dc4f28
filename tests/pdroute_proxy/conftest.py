"""The proxy in front of fake engines, each on its own loopback port under real uvicorn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from pdroute_proxy.app import create_proxy_app
from pdroute_proxy.settings import ProxySettings
from tests.app.conftest import Running, start_server
from tests.pdroute_proxy.fake_engine import FakeEngine


def engines_file(path: Path, prefill: list[FakeEngine], decode: list[FakeEngine]) -> Path:
    pools = {
        "prefill": [{"id": e.name, "url": e.metrics_url, "kind": "vllm"} for e in prefill],
        "decode": [{"id": e.name, "url": e.metrics_url, "kind": "vllm"} for e in decode],
    }
    path.write_text(json.dumps({"pools": pools}))
    return path


@dataclass
class Proxy:
    url: str
    registry: CollectorRegistry
    server: Running
    app: Any

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``, read from /metrics."""
        text = httpx.get(f"{self.url}/metrics").text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def stop(self) -> None:
        self.server.stop()


def start_proxy(
    tmp_path: Path, prefill: list[FakeEngine], decode: list[FakeEngine], **settings: Any
) -> Proxy:
    for engine in (*prefill, *decode):
        if not engine.port:
            engine.start()
    path = engines_file(tmp_path / "engines.json", prefill, decode)
    values: dict[str, Any] = {
        "engines_file": path,
        "watch_params": False,
        "kv_block_size": 16,
        "prefill_timeout_s": 2.0,
        "read_timeout_s": 2.0,
        "down_s": 0.5,
        **settings,
    }
    registry = CollectorRegistry()
    app = create_proxy_app(ProxySettings(**values), registry=registry)
    server = start_server(app)
    return Proxy(server.url, registry, server, app)


@pytest.fixture
def fakes() -> Iterator[tuple[FakeEngine, FakeEngine]]:
    """A prefill engine and a decode engine, started; stopped after the test."""
    prefill, decode = FakeEngine("p0"), FakeEngine("d0")
    prefill.start()
    decode.start()
    yield prefill, decode
    prefill.stop()
    decode.stop()
