"""Publish a fitted params.json into the service's ConfigMap, from inside the cluster.

    python publish_params.py /work/params.json --configmap pdroute-params [--key params.json]

The file is validated with pdroute's own loader first, so a bad file is never published.
Then one JSON merge patch (RFC 7386) replaces the ConfigMap key, authenticated with the pod's
ServiceAccount token; the Role this needs is ``get`` and ``patch`` on that one ConfigMap
(deploy/kubernetes/reprofile/role.yaml). The service pods mount the ConfigMap as a directory:
the kubelet swaps the file in place (a symlink swap) within about a minute, and each pod's file
watcher validates and reloads it, with no restart.

Standard library only besides pdroute itself: the profiler image needs no Kubernetes client.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pdroute_core.errors import PdrouteError
from solver.params import load_params_and_bytes

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A ConfigMap holds at most 1 MiB in total (etcd's object limit); leave room for metadata.
MAX_PARAMS_BYTES = 900_000
ANNOTATION_PARAMS_ID = "pdroute.io/params-id"
ANNOTATION_PUBLISHED_AT = "pdroute.io/published-at"


class PublishError(PdrouteError):
    """Publishing failed; the message is one line for the Job's log."""


@dataclass(frozen=True)
class ApiServer:
    """Where and how to reach the Kubernetes API."""

    url: str  # e.g. https://10.96.0.1:443
    token: str
    namespace: str
    ca_file: Path | None  # None: the system trust store (or plain http, in tests)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https://"):
            return None
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise PublishError(
            f"{what}: cannot read {path} ({exc.strerror}); is this running in a pod?"
        ) from None


def api_from_args(args: argparse.Namespace) -> ApiServer:
    """The in-cluster API server from the ServiceAccount mount and the KUBERNETES_SERVICE_* env."""
    url = args.api_url
    if url is None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise PublishError("KUBERNETES_SERVICE_HOST is not set; pass --api-url outside a cluster")
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace = args.namespace or _read(args.service_account_dir / "namespace", "namespace")
    token = _read(args.token_file or args.service_account_dir / "token", "token")
    ca_file = args.ca_file
    if ca_file is None and (args.service_account_dir / "ca.crt").exists():
        ca_file = args.service_account_dir / "ca.crt"
    return ApiServer(url.rstrip("/"), token, namespace, ca_file)


def _call(
    api: ApiServer, method: str, path: str, body: dict[str, Any] | None, content_type: str | None
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{api.url}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {api.token}")
    req.add_header("Accept", "application/json")
    if content_type is not None:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, timeout=10, context=api.ssl_context()) as resp:
        answer: dict[str, Any] = json.loads(resp.read() or b"{}")
        return answer


def call_with_retries(
    api: ApiServer,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    content_type: str | None = None,
    attempts: int = 4,
    backoff_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """One API call; retries connection errors, 429 and 5xx with doubling back-off."""
    for attempt in range(1, attempts + 1):
        try:
            return _call(api, method, path, body, content_type)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            with contextlib.suppress(ValueError, AttributeError):  # not JSON, or not an object
                detail = str(json.loads(detail).get("message", detail))
            retryable = exc.code == 429 or exc.code >= 500
            if not retryable or attempt == attempts:
                hint = " (check the Role: get and patch on this ConfigMap)" if exc.code == 403 else ""
                raise PublishError(f"{method} {path}: HTTP {exc.code}: {detail}{hint}") from None
        except (urllib.error.URLError, OSError) as exc:
            if attempt == attempts:
                raise PublishError(f"{method} {path}: {exc}") from None
        sleep(backoff_s * 2 ** (attempt - 1))
    raise PublishError(f"{method} {path}: no attempts made")  # only reached with attempts < 1


def publish(
    api: ApiServer,
    configmap: str,
    key: str,
    params_path: Path,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Validate ``params_path`` and write it into ``configmap[key]``; returns a one-line summary."""
    # pdroute's one loader (InvalidParams, a PdrouteError, on a bad file); the bytes it
    # validated are the bytes published, so the file cannot change in between.
    params, raw = load_params_and_bytes(params_path)
    if len(raw) > MAX_PARAMS_BYTES:
        raise PublishError(f"{params_path}: {len(raw)} bytes is too large for a ConfigMap")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PublishError(f"{params_path}: not UTF-8 text (a ConfigMap holds UTF-8)") from None
    path = f"/api/v1/namespaces/{api.namespace}/configmaps/{configmap}"
    current = call_with_retries(api, "GET", path, sleep=sleep)
    previous = (current.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_PARAMS_ID, "unknown")
    if (current.get("data") or {}).get(key) == text:
        return f"unchanged: {api.namespace}/{configmap} already holds {params.params_id}"
    patch = {
        "metadata": {
            "annotations": {
                ANNOTATION_PARAMS_ID: params.params_id,
                ANNOTATION_PUBLISHED_AT: now().isoformat(timespec="seconds"),
            }
        },
        "data": {key: text},
    }
    call_with_retries(api, "PATCH", path, patch, "application/merge-patch+json", sleep=sleep)
    meta = params.metadata
    return (
        f"published {params.params_id} ({meta.model} on {meta.hardware}, {meta.transfer_path}) into "
        f"{api.namespace}/{configmap}[{key}], replacing {previous}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="publish_params", description=__doc__.splitlines()[0])
    p.add_argument("params", type=Path, help="the params.json to publish")
    p.add_argument("--configmap", required=True, help="ConfigMap name (in the pod's namespace)")
    p.add_argument("--key", default="params.json", help="data key the service pods mount as a file")
    p.add_argument("--namespace", help="default: the pod's own namespace")
    p.add_argument("--api-url", help="default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    p.add_argument("--token-file", type=Path, help="default: the ServiceAccount token")
    p.add_argument("--ca-file", type=Path, help="default: the ServiceAccount CA bundle")
    p.add_argument("--service-account-dir", type=Path, default=SERVICE_ACCOUNT_DIR, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(publish(api_from_args(args), args.configmap, args.key, args.params), flush=True)
    except PdrouteError as exc:
        print(f"publish_params: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
