"""Request bodies of the OpenAI routes, as strict pydantic models.

Unknown fields are refused (``extra="forbid"``) so a client never believes a parameter took effect when
it did not; fields the OpenAI API defines but this server cannot honour (n > 1, logprobs, echo, ...)
are declared only to refuse values other than their neutral default with a precise message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP_STRINGS = 4


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False


class GenerationFields(BaseModel):
    """Parameters shared by /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # vLLM/llama.cpp extension; 0 disables
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    seed: int | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    user: str | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported (one choice per request); send several requests instead")
        return value

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(value)}")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys_are_token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            if not key.lstrip("-").isdigit() or int(key) < 0:
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias values must be in [-100, 100], got {bias} for token {key}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage_chunk(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(GenerationFields):
    prompt: str | list[int] | list[str]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be empty")
        if isinstance(value, list) and isinstance(value[0], str) and len(value) != 1:
            raise ValueError(f"only one prompt per request is supported, got {len(value)}")
        return value

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise ValueError("echo=true is not supported")
        return value

    @field_validator("suffix", "logprobs")
    @classmethod
    def _unsupported_if_set(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("this parameter is not supported; leave it unset")
        return value

    @field_validator("best_of")
    @classmethod
    def _best_of_one(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("only best_of=1 is supported")
        return value


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    # extra="allow": templates may read fields such as ``name``; they pass through untouched.
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def as_template_dict(self) -> dict[str, Any]:
        data = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):
            data["content"] = "".join(part.text for part in self.content)
        data.setdefault("content", "")
        return data


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    add_generation_prompt: bool = True

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool) -> bool:
        if value:
            raise ValueError("logprobs=true is not supported")
        return value

    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
