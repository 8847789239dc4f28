"""A stand-in for the Kubernetes API server on loopback: one ConfigMap, GET and merge PATCH.

It applies JSON merge patches the way the API server does, so tests check what a real
server would end up holding.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "test-token-123"
NAMESPACE = "pdroute"
CONFIGMAP = "pdroute-params"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeApi:
    def __init__(self) -> None:
        self.configmap: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
            "data": {"params.json": "{}", "other": "kept"},
        }
        self.requests: list[tuple[str, str, str | None, str | None]] = []
        self.fail_next: list[int] = []  # status codes to answer before behaving
        self.allowed_verbs = {"GET", "PATCH"}
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else None
                api.requests.append((self.command, self.path, self.headers.get("Content-Type"), body))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._answer(401, {"message": "Unauthorized"})
                if api.fail_next:
                    return self._answer(api.fail_next.pop(0), {"message": "try again"})
                if self.command not in api.allowed_verbs:
                    return self._answer(403, {"message": f"configmaps is forbidden: cannot {self.command}"})
                if self.path != f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIGMAP}":
                    return self._answer(404, {"message": "configmaps not found"})
                if self.command == "PATCH":
                    if self.headers.get("Content-Type") != "application/merge-patch+json":
                        return self._answer(415, {"message": "unsupported patch type"})
                    api.configmap = merge_patch(api.configmap, json.loads(body or "null"))
                return self._answer(200, api.configmap)

            do_GET = _handle
            do_PATCH = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
