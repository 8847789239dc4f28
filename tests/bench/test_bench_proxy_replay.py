"""The head-to-head's proxy settings per policy: each pdroute variant runs without its input."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_proxy_replay import proxy_env
from pdroute_proxy.settings import ProxySettings

SLO = (7949.0, 174.9)


def read(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProxySettings:
    """The settings the proxy reads from ``env`` (its environment, as the bench starts it)."""
    with monkeypatch.context() as m:
        for name, value in env.items():
            m.setenv(name, value)
        return ProxySettings(engines_file=tmp_path / "engines.json")


def test_each_variant_is_pdroute_without_its_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = tmp_path / "params.json"
    full = proxy_env("pdroute", params, SLO, 4096, 16)
    one_step = proxy_env("pdroute-one-prompt-step", params, SLO, 4096, 16)
    short = proxy_env("pdroute-short-window", params, SLO, 4096, 16)
    assert {k: v for k, v in short.items() if k != "PDROUTE_ARRIVAL_WINDOW_S"} == full
    s_full, s_one, s_short = (read(e, tmp_path, monkeypatch) for e in (full, one_step, short))
    assert s_full.policy == s_one.policy == s_short.policy == "pdroute"
    assert (s_full.default_ttft_slo_ms, s_full.default_tpot_slo_ms) == SLO
    assert (s_full.prefill_step_tokens, s_full.arrival_window_s) == (4096, 30.0)  # the proxy's window
    assert (s_one.prefill_step_tokens, s_one.arrival_window_s) == (None, 30.0)
    assert (s_short.prefill_step_tokens, s_short.arrival_window_s) == (4096, 0.0)
    # A rule is the rule; without p0's budget nobody is told one.
    rule = read(proxy_env("threshold", params, SLO, None, 16), tmp_path, monkeypatch)
    assert (rule.policy, rule.prefill_step_tokens) == ("threshold", None)
