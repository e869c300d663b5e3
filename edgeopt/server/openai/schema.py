"""Request bodies of the OpenAI routes, as strict pydantic models.

Unknown fields are refused (``extra="forbid"``) so a client never believes a parameter took effect when
it did not; fields the OpenAI API defines but this server cannot honour (n > 1, best_of, suffix)
are declared only to refuse values other than their neutral default with a precise message.
``response_format`` is enforced by constrained decoding (edgeopt.engine.grammar); ``logprobs``,
``top_logprobs`` and ``echo`` are honoured (edgeopt.engine.logprobs says which logits they come from).

Sampling parameters are only *parsed* here (types); their accepted ranges live in one place,
:mod:`edgeopt.engine.validation`, which ``Engine.add_request`` applies once, before anything is queued.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgeopt.server.chat.request import check_message_count
from edgeopt.server.openai.tool_schema import MessageToolCall, ToolChoice, ToolDefinition
from edgeopt.server.http.text_fields import Text, valid_unicode


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    include_obfuscation: bool | None = None  # padding against length side channels: accepted, not added


class JsonSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema is enforced whether ``strict`` is true or not."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: Text
    description: Text | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class GenerationFields(BaseModel):
    """Parameters shared by /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: Text
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # vLLM/llama.cpp extension; 0 disables
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    stop: Text | list[Text] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    # Sent by client libraries and agent frameworks; accepted and ignored (the README's "Fields clients
    # send" lists them): a local server stores nothing and has one service tier.
    user: Text | None = None
    store: bool | None = None
    metadata: dict[str, Text] | None = None
    service_tier: Text | None = None
    prompt_cache_key: Text | None = None
    safety_identifier: Text | None = None
    response_format: ResponseFormat | None = None  # also on /v1/completions, as in vLLM and llama-server

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported (one choice per request); send several requests instead")
        return value


Prompt = Text | list[int]  # one prompt: text, or token ids
MAX_BATCH_PROMPTS = 256  # prompts in one /v1/completions request (each is queued as its own request)


class CompletionRequest(GenerationFields):
    # One prompt (text or token ids), or a batch: texts or token-id lists, as OpenAI's legacy API takes them.
    prompt: Text | list[int] | list[Text] | list[list[int]]
    # 0 only with echo (completion_prep refuses it otherwise): score the prompt without generating.
    max_tokens: int | None = Field(None, ge=0)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None  # legacy: the number of top logprobs per token (0: only the chosen token's)

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be empty")
        if isinstance(value, list) and len(value) > MAX_BATCH_PROMPTS:
            raise ValueError(f"{len(value)} prompts in one request; at most {MAX_BATCH_PROMPTS} are allowed")
        if isinstance(value, list) and any(isinstance(p, list) and not p for p in value):
            raise ValueError("a prompt of the batch is an empty token list")
        return value

    def prompts(self) -> list[Prompt]:
        """The prompts of the request: one, or each of a batch."""
        if isinstance(self.prompt, str) or (self.prompt and isinstance(self.prompt[0], int)):
            return [self.prompt]  # type: ignore[list-item]
        return list(self.prompt)  # type: ignore[arg-type]

    @field_validator("suffix")
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


class ContentPart(BaseModel):
    """One part of a message's content. Only text is used; image, audio and file parts are parsed (not a
    type error about "text") so the route can refuse them by name: "images are not supported"."""

    model_config = ConfigDict(extra="allow", strict=True)  # a media part's payload ("image_url": {...})
    type: Literal["text", "image_url", "input_audio", "file"]
    text: Text | None = None

    @model_validator(mode="after")
    def _text_part_is_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError('a part of type "text" needs a "text" string')
        if self.type == "text" and self.model_extra:
            raise ValueError(f'a text part has only "type" and "text"; remove {sorted(self.model_extra)}')
        return self


class ChatMessage(BaseModel):
    # extra="allow": templates may read fields such as ``name``; they pass through untouched.
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None
    tool_calls: list[MessageToolCall] | None = None  # an assistant turn that called tools
    tool_call_id: Text | None = None  # a tool's result: which call it answers

    @model_validator(mode="after")
    def _extras_are_valid_unicode(self) -> ChatMessage:
        valid_unicode(self.model_extra or {})
        return self


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    # Passed to the chat template (gpt-oss and Qwen3 templates read it); other models ignore it.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _few_messages(cls, value: Any) -> Any:
        return check_message_count(value)
