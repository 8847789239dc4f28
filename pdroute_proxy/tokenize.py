"""Text prompts and chat messages to token ids, through an engine's ``/tokenize``.

Engines started with ``--skip-tokenizer-init`` (the fleet of docs/proxy.md's laptop example)
have no tokenizer: then a text prompt or a chat is a clear 400 saying to send token ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.engines.config import Fleet
from pdroute_proxy.errors import BadRequest, NoEngine
from pdroute_proxy.http1 import EngineClient, Timeouts
from pdroute_proxy.ledger import Ledger
from pdroute_proxy.upstream import UpstreamError, api_base, post_json

NO_TOKENIZER = (
    "{what} need an engine tokenizer, and the engines answer /tokenize with HTTP {status}"
    " (started with --skip-tokenizer-init?): send the prompt as token ids to /v1/completions"
)


class Tokenizer:
    def __init__(
        self,
        fleet: Callable[[], Fleet],
        ledger: Ledger,
        client: Callable[[], EngineClient],
        monotonic: Callable[[], float],
        timeout: Timeouts,
    ) -> None:
        self.fleet = fleet
        self.ledger = ledger
        self.client = client
        self.monotonic = monotonic
        self.timeout = timeout

    async def _tokenize(self, body: dict[str, Any], what: str, param: str) -> list[int]:
        fleet = self.fleet()
        ids = (*fleet.pools.get("decode", ()), *fleet.pools.get("mixed", ()), *fleet.pools.get("prefill", ()))
        for engine_id in self.ledger.by_load(ids, self.monotonic()):
            url = f"{api_base(fleet.endpoints[engine_id].url)}/tokenize"
            try:
                answer = await post_json(self.client(), url, body, self.timeout)
            except UpstreamError as exc:
                if exc.cause in ("connect", "timeout"):
                    continue
                raise BadRequest(NO_TOKENIZER.format(what=what, status=exc.status), param) from None
            tokens = answer.get("tokens")
            if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
                raise BadRequest(f"{what}: the engine's /tokenize gave no token ids", param)
            return tokens
        raise NoEngine("no engine answered /tokenize")

    async def text(self, prompt: str) -> list[int]:
        return await self._tokenize({"prompt": prompt}, "text prompts", "prompt")

    async def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        return await self._tokenize(
            {"messages": messages, "add_generation_prompt": True}, "chat completions", "messages"
        )
