"""A small closed-loop HTTP/1.1 load generator: N keep-alive connections, one request in flight
each, on asyncio streams. Light enough to share two cores with the server under test; the
ratio against a baseline server measured by the same generator in the same run is what counts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_s: np.ndarray  # one per completed request

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000)


async def _worker(host: str, port: int, payload: bytes, deadline: float, lat: list[float]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            writer.write(payload)
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if b" 200 " not in status_line:
                errors += 1
            lat.append(time.perf_counter() - start)
    finally:
        writer.close()
    return errors


def run_load(host: str, port: int, path: str, body: bytes, connections: int, seconds: float) -> LoadResult:
    payload = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def main() -> LoadResult:
        lat: list[float] = []
        start = time.perf_counter()
        deadline = start + seconds
        errs = await asyncio.gather(
            *(_worker(host, port, payload, deadline, lat) for _ in range(connections))
        )
        elapsed = time.perf_counter() - start
        return LoadResult(len(lat), sum(errs), elapsed, np.asarray(lat))

    return asyncio.run(main())
