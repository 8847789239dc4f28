"""The proxy's HTTP edge: bad requests are clear 400s naming the field; text prompts and chats go
through the engines' /tokenize when they have a tokenizer, and are a clear 400 when they do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pdroute_proxy.conftest import start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine
from tests.pdroute_proxy.test_paths import reference


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, -2], "max_tokens": 4}, "prompt"),
        ({"prompt": [], "max_tokens": 4}, "prompt"),
        ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1, 2], "n": 2}, "n"),
        ({"max_tokens": 3}, "prompt"),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine], body: dict[str, Any], param: str
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json=body)
            assert r.status_code == 400
            error = r.json()["error"]
            assert error["param"].startswith(param) and param in error["message"]
            assert client.post("/v1/completions", content=b"{not json").status_code == 400
        assert decode.requests == []
    finally:
        proxy.stop()


def test_text_prompts_without_a_tokenizer_are_a_clear_400(
    tmp_path: Path, fakes: tuple[FakeEngine, FakeEngine]
) -> None:
    prefill, decode = fakes
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="collocated")
    try:
        with proxy.client() as client:
            r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3})
            assert r.status_code == 400
            assert "token ids" in r.json()["error"]["message"]
            r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        assert decode.requests == []
    finally:
        proxy.stop()


def test_text_prompts_and_chats_with_a_tokenizer(tmp_path: Path) -> None:
    prefill, decode = FakeEngine("p0", has_tokenizer=True), FakeEngine("d0", has_tokenizer=True)
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        ids = [ord(c) for c in "hello world"]
        with proxy.client() as client:
            r = client.post(
                "/v1/completions", json={"prompt": "hello world", "max_tokens": 4, "return_token_ids": True}
            )
            assert r.status_code == 200
            assert r.json()["choices"][0]["token_ids"] == reference(ids, 4)
            chat = {"messages": [{"role": "user", "content": "hello world"}], "max_completion_tokens": 3}
            r = client.post("/v1/chat/completions", json=chat)
            assert r.status_code == 200
            answer = r.json()
            assert answer["object"] == "chat.completion"
            assert answer["choices"][0]["message"]["role"] == "assistant"
            assert answer["usage"]["completion_tokens"] == 3
            with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as s:
                lines = [line for line in s.iter_lines() if line.startswith("data: {")]
            assert len(lines) == 3 and '"chat.completion.chunk"' in lines[0]
            models = client.get("/v1/models").json()
            assert models["data"][0]["id"] == "fake-model"
    finally:
        proxy.stop()
        prefill.stop()
        decode.stop()
