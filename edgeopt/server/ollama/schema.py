"""Request bodies of Ollama's API (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/show) as its
official clients send them. Unknown fields are refused by name (a setting silently ignored is a defect);
the ``options`` this server cannot honour are refused by edgeopt.server.ollama.options."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from edgeopt.server.chat.request import check_message_count
from edgeopt.server.http.text_fields import Text, valid_unicode

# Ollama's "format": "" (none), "json" (any JSON value... an object, in practice), or a JSON schema.
Format = Literal["", "json"] | dict[str, Any] | None
# "think": a switch, or a level for models that take one (gpt-oss: "low", "medium", "high").
Think = bool | Literal["low", "medium", "high"] | None
KeepAlive = float | int | str | None  # "5m", 300, -1, 0: accepted; one model stays loaded for the server's life
# Option values are typed one by one (edgeopt.server.ollama.options); keys and texts must be valid Unicode.
Options = Annotated[dict[str, Any], AfterValidator(valid_unicode)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OllamaToolFunction(_Body):
    name: Text
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None  # newer servers number a turn's calls; informational


class OllamaToolCall(_Body):
    function: OllamaToolFunction


class OllamaMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: Text | None = ""
    thinking: Text | None = None  # an earlier assistant turn's thinking, as the client got it
    images: list[Any] | None = None  # refused by the route: this server generates from text only
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: Text | None = None  # a tool message: which tool's result it is


class OllamaFunction(_Body):
    name: Text = Field(min_length=1, max_length=64)
    description: Text | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; absent means "no arguments"
    strict: bool | None = None


class OllamaTool(_Body):
    type: Literal["function"] = "function"
    function: OllamaFunction


class _Generating(_Body):
    model: Text = Field(min_length=1)
    stream: bool | None = None  # Ollama streams unless told not to
    format: Format = None
    options: Options | None = None
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)


class OllamaChatRequest(_Generating):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[OllamaTool] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _few_messages(cls, value: Any) -> Any:
        return check_message_count(value)


class OllamaGenerateRequest(_Generating):
    prompt: Text | None = None
    suffix: Text | None = None
    system: Text | None = None
    template: Text | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: list[Any] | None = None


class OllamaEmbedRequest(_Body):
    model: Text = Field(min_length=1)
    input: Text | list[Text]
    truncate: bool | None = None
    options: Options | None = None
    keep_alive: KeepAlive = None
    dimensions: int | None = Field(None, ge=1)


class OllamaEmbeddingsRequest(_Body):
    model: Text = Field(min_length=1)
    prompt: Text
    options: Options | None = None
    keep_alive: KeepAlive = None


class OllamaShowRequest(_Body):
    model: Text | None = None
    name: Text | None = None  # older clients send the model as "name"
    verbose: bool | None = None

    def model_name(self) -> str:
        return self.model or self.name or ""
