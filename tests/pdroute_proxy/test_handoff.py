"""The hand-off requests as each connector needs them (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdroute_proxy.handoff import Handoff, decode_request, prefill_request
from pdroute_proxy.relay import Job
from pdroute_proxy.settings import KvConnector, ProxySettings
from pdroute_proxy.upstream import UpstreamError


def settings(tmp_path: Path, connector: KvConnector) -> ProxySettings:
    return ProxySettings(engines_file=tmp_path / "e.json", kv_connector=connector, kv_block_size=16)


def answer(token: int, params: dict[str, object] | None = None) -> dict[str, object]:
    return {
        "choices": [{"token_ids": [token], "text": "", "finish_reason": "length"}],
        "kv_transfer_params": params,
    }


def test_the_prefill_request_is_one_token_and_keeps_the_clients_sampling() -> None:
    body = {"temperature": 0.5, "seed": 3, "stream": True, "max_tokens": 50, "stream_options": {}}
    expected = {"temperature": 0.5, "seed": 3, "prompt": [1, 2], "max_tokens": 1, "stream": False}
    assert prefill_request([1, 2], body, "example") == {**expected, "return_token_ids": True}
    assert prefill_request([1, 2], body, "nixl")["kv_transfer_params"]["do_remote_decode"] is True


@pytest.mark.parametrize(
    ("prompt_len", "sent_len", "max_tokens", "skip"),
    [(20, 21, 9, 0), (32, 32, 10, 1), (17, 18, 9, 0), (16, 16, 10, 1)],
)
def test_example_connector(
    tmp_path: Path, prompt_len: int, sent_len: int, max_tokens: int, skip: int
) -> None:
    job = Job(list(range(prompt_len)), 10, {"ignore_eos": True})
    handoff = Handoff.of(answer(99))
    body, dropped = decode_request(job, [99], handoff, settings(tmp_path, "example"))
    assert (len(body["prompt"]), body["max_tokens"], dropped) == (sent_len, max_tokens, skip)
    assert body["ignore_eos"] is True and "kv_transfer_params" not in body


def test_nixl_passes_the_prefill_engines_params(tmp_path: Path) -> None:
    job = Job([1, 2, 3], 5, {})
    params: dict[str, object] = {"remote_engine_id": "p0", "remote_block_ids": [4]}
    body, dropped = decode_request(job, [7], Handoff.of(answer(7, params)), settings(tmp_path, "nixl"))
    assert body == {"prompt": [1, 2, 3], "max_tokens": 5, "kv_transfer_params": params} and dropped == 1
    with pytest.raises(UpstreamError):
        decode_request(job, [7], Handoff.of(answer(7)), settings(tmp_path, "nixl"))


def test_a_resumed_request_carries_every_token_sent(tmp_path: Path) -> None:
    body, dropped = decode_request(Job([1, 2], 6, {}), [5, 6, 7], None, settings(tmp_path, "nixl"))
    assert (body["prompt"], body["max_tokens"], dropped) == ([1, 2, 5, 6, 7], 3, 0)


@pytest.mark.parametrize(
    "bad", [{}, {"choices": []}, {"choices": [{"token_ids": [1, 2]}]}, {"choices": [{}]}]
)
def test_a_prefill_answer_without_one_token_is_a_protocol_error(bad: dict[str, object]) -> None:
    with pytest.raises(UpstreamError) as info:
        Handoff.of(bad)
    assert info.value.cause == "protocol"
