"""deploy/profiler/publish_params.py against a stand-in Kubernetes API server on loopback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from solver.params import load_params
from tests.deploy.conftest import DEPLOY
from tests.deploy.fake_kube_api import CONFIGMAP, NAMESPACE, TOKEN, FakeApi
from tests.factories import write_params

SCRIPT = DEPLOY / "profiler" / "publish_params.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("publish_params", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


publish_params = load_script()


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.close()


def client(api: FakeApi, **overrides: Any) -> Any:
    return publish_params.ApiServer(
        **{"url": api.url, "token": TOKEN, "namespace": NAMESPACE, "ca_file": None, **overrides}
    )


def test_publishes_the_file_and_annotates_it(api: FakeApi, tmp_path: Path) -> None:
    params = write_params(tmp_path / "params.json", alpha=0.07)
    when = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    summary = publish_params.publish(client(api), CONFIGMAP, "params.json", params, now=lambda: when)
    expected_id = load_params(params).params_id
    assert summary.startswith(f"published {expected_id} (test-model on test-gpu, pinned-relay)")
    assert api.configmap["data"] == {"params.json": params.read_text(), "other": "kept"}
    assert api.configmap["metadata"]["annotations"] == {
        "pdroute.io/params-id": expected_id,
        "pdroute.io/published-at": "2026-03-01T12:00:00+00:00",
    }
    assert [(m, ct) for m, _, ct, _ in api.requests] == [
        ("GET", None),
        ("PATCH", "application/merge-patch+json"),
    ]
    # Publishing the same file again changes nothing.
    again = publish_params.publish(client(api), CONFIGMAP, "params.json", params)
    assert again.startswith("unchanged")
    assert [m for m, *_ in api.requests] == ["GET", "PATCH", "GET"]


def test_a_bad_file_is_never_published(api: FakeApi, tmp_path: Path) -> None:
    bad = write_params(tmp_path / "params.json", gamma=-1.0)
    with pytest.raises(publish_params.PdrouteError, match="gamma"):
        publish_params.publish(client(api), CONFIGMAP, "params.json", bad)
    assert api.requests == []
    assert api.configmap["data"]["params.json"] == "{}"


def test_retries_server_errors_then_succeeds(api: FakeApi, tmp_path: Path) -> None:
    params = write_params(tmp_path / "params.json")
    api.fail_next = [503, 500]
    sleeps: list[float] = []
    publish_params.publish(client(api), CONFIGMAP, "params.json", params, sleep=sleeps.append)
    assert sleeps == [1.0, 2.0]
    assert api.configmap["data"]["params.json"] == params.read_text()


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("forbidden", "HTTP 403: configmaps is forbidden: cannot PATCH (check the Role"),
        ("wrong-token", "HTTP 401: Unauthorized"),
        ("missing", "HTTP 404: configmaps not found"),
    ],
)
def test_refusals_are_one_line_errors_without_retries(
    api: FakeApi, tmp_path: Path, setup: str, needle: str
) -> None:
    params = write_params(tmp_path / "params.json")
    overrides: dict[str, Any] = {}
    configmap = CONFIGMAP
    if setup == "forbidden":
        api.allowed_verbs = {"GET"}
    elif setup == "wrong-token":
        overrides["token"] = "nope"
    else:
        configmap = "no-such-configmap"
    sleeps: list[float] = []
    with pytest.raises(publish_params.PublishError, match=None) as err:
        publish_params.publish(
            client(api, **overrides), configmap, "params.json", params, sleep=sleeps.append
        )
    assert needle in str(err.value)
    assert "\n" not in str(err.value)
    assert sleeps == []


def test_command_line_in_cluster_layout(api: FakeApi, tmp_path: Path) -> None:
    """Run as the Job does, with the ServiceAccount files in their usual shape."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(TOKEN + "\n")
    (sa / "namespace").write_text(NAMESPACE)
    params = write_params(tmp_path / "params.json")
    cmd = [sys.executable, str(SCRIPT), str(params), "--configmap", CONFIGMAP, "--api-url", api.url]
    ok = subprocess.run([*cmd, "--service-account-dir", str(sa)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("published ")
    assert api.configmap["data"]["params.json"] == params.read_text()

    missing = subprocess.run(
        [*cmd, "--service-account-dir", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2
    assert (
        missing.stderr.count("\n") == 1 and "publish_params: error: namespace: cannot read" in missing.stderr
    )


def test_in_cluster_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(TOKEN)
    (sa / "namespace").write_text("ns1")
    (sa / "ca.crt").write_text("not used here")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    args = publish_params.build_parser().parse_args(
        ["p.json", "--configmap", "c", "--service-account-dir", str(sa)]
    )
    api = publish_params.api_from_args(args)
    assert (api.url, api.token, api.namespace, api.ca_file) == (
        "https://10.96.0.1:443",
        TOKEN,
        "ns1",
        sa / "ca.crt",
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert publish_params.api_from_args(args).url == "https://[fd00::1]:443"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(publish_params.PublishError, match="KUBERNETES_SERVICE_HOST"):
        publish_params.api_from_args(args)
