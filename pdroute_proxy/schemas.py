"""The OpenAI-compatible requests the proxy accepts (pydantic at the edge).

Fields the proxy does not read (sampling parameters, ``ignore_eos``, ``seed``, ...) are kept
and passed to the engines as sent. One prompt and one choice per request.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
MAX_PROMPT_TOKENS = 1_048_576


class _OpenAI(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: Annotated[int, Field(ge=1, le=1, description="one choice per request")] = 1
    return_token_ids: bool | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def passthrough(self) -> dict[str, Any]:
        """The client's fields as sent, for the engines (the proxy sets its own per call)."""
        return self.model_dump(exclude_unset=True)


class CompletionRequest(_OpenAI):
    prompt: (
        Annotated[list[TokenId], Field(min_length=1, max_length=MAX_PROMPT_TOKENS)]
        | Annotated[str, Field(min_length=1, max_length=16 * MAX_PROMPT_TOKENS)]
    )
    max_tokens: Annotated[int, Field(ge=1, le=MAX_PROMPT_TOKENS)] = 16


class ChatRequest(_OpenAI):
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=4096)]
    max_tokens: Annotated[int, Field(ge=1, le=MAX_PROMPT_TOKENS)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=MAX_PROMPT_TOKENS)] | None = None

    def output_limit(self) -> int:
        return self.max_completion_tokens or self.max_tokens or 16
