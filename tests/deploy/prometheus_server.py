"""A real Prometheus server for tests: loopback only, temporary data directory, HTTP API via httpx."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.app.conftest import free_port
from tests.conftest import stop_process

T = TypeVar("T")


class PrometheusServer:
    """``prometheus`` as a child process on ``127.0.0.1:<free port>``."""

    def __init__(self, binary: str, config: str, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.binary = binary
        self.workdir = workdir
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(config)
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("w")
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self.url, timeout=5.0)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def wait_ready(self, timeout_s: float = 20.0, attempts: int = 3) -> None:
        """Wait for ``/-/ready``; restart on another port if the free one was taken meanwhile."""

        def ready() -> bool | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log()}")
            try:
                return self.http.get("/-/ready").status_code == 200 or None
            except httpx.TransportError:
                return None

        for attempt in range(attempts):
            try:
                self.wait_for(ready, timeout_s, "prometheus to become ready")
                return
            except RuntimeError as exc:
                # free_port() releases the port before prometheus binds it: rarely, another
                # process takes it in between. Anything else is a real failure.
                if "address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                self.http.close()
                self._start()

    def api(self, path: str, **params: str) -> Any:
        r = self.http.get(f"/api/v1/{path}", params=params)
        body = r.json()
        if r.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"{path} {params}: HTTP {r.status_code}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector as Prometheus returns it."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, expr: str, by: str) -> dict[str, float]:
        """``{value of label `by`: sample value}`` of an instant query."""
        return {s["metric"].get(by, ""): float(s["value"][1]) for s in self.query(expr)}

    @staticmethod
    def wait_for(check: Callable[[], T | None], timeout_s: float, what: str, poll_s: float = 0.2) -> T:
        """Poll ``check`` until it returns something other than None (or False)."""
        deadline = time.monotonic() + timeout_s
        last: T | None = None
        while time.monotonic() < deadline:
            last = check()
            if last is not None and last is not False:
                return last
            time.sleep(poll_s)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")

    def stop(self) -> None:
        self.http.close()
        stop_process(self.proc)
        self._log.close()
