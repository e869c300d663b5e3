"""The request bodies of POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API), as
strict pydantic models.

Only what this server honours, or ignores on purpose, is accepted; docs/api-messages.md lists every field.
Prompt caching hints (``cache_control``) are accepted everywhere they may appear and ignored: the prefix
cache reuses every prompt's KV without being asked. Media blocks (``image``, ``document``) and server-run
tools (web search, code execution, ...) are refused by name: the models served here read text, and this
server runs no tools of its own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgeopt.engine.validation import MAX_STOP_STRINGS
from edgeopt.server.chat.request import check_message_count
from edgeopt.server.http.text_fields import Text

_STRICT = ConfigDict(extra="forbid", strict=True)
_MEDIA_BLOCKS = {"image": "images are", "document": "documents are", "search_result": "search results are",
                 "container_upload": "file uploads are"}
BLOCK_TYPES = ("text", "tool_use", "tool_result", "thinking", "redacted_thinking")


class ContentBlock(BaseModel):
    """One block of a message's content. One model for every type (rather than a union) so that an error
    names the field a block of that type lacks, not every union branch at once."""

    model_config = _STRICT
    type: Literal["text", "tool_use", "tool_result", "thinking", "redacted_thinking"]
    text: Text | None = None
    id: Text | None = None  # tool_use
    name: Text | None = None
    input: dict[str, Any] | None = None
    tool_use_id: Text | None = None  # tool_result
    content: Text | list[ContentBlock] | None = None
    is_error: bool | None = None
    thinking: Text | None = None  # thinking: given back to templates that show earlier thinking
    signature: Text | None = None  # thinking: ours are empty; any is accepted (nothing is signed here)
    data: Text | None = None  # redacted_thinking: opaque, dropped
    cache_control: dict[str, Any] | None = None  # prompt caching hint: ignored (the prefix cache is automatic)
    citations: list[Any] | None = None  # text: citations of an earlier answer; ignored

    @field_validator("type", mode="before")
    @classmethod
    def _media_refused(cls, value: Any) -> Any:
        if value in _MEDIA_BLOCKS:
            raise ValueError(f"{_MEDIA_BLOCKS[value]} not supported by this model (a block of type {value!r}); "
                             'send text only: a string, or blocks {"type": "text", "text": ...}')
        if isinstance(value, str) and value not in BLOCK_TYPES:
            raise ValueError(f"content blocks of type {value!r} are not supported here (server-run tools and "
                             f"their results are not: this server runs no tools); use {', '.join(BLOCK_TYPES)}")
        return value

    @model_validator(mode="after")
    def _has_its_fields(self) -> ContentBlock:
        missing = [name for name, value in self._required_fields().items() if value is None]
        if missing:
            raise ValueError(f"a {self.type!r} block needs {', '.join(repr(m) for m in missing)}")
        if isinstance(self.content, list) and self.type == "tool_result":
            kinds = sorted({block.type for block in self.content} - {"text"})
            if kinds:
                raise ValueError(f"a tool_result's content may hold text blocks only, not {', '.join(kinds)}")
        return self

    def _required_fields(self) -> dict[str, object]:
        """What a block of this type needs (beyond "type"); checked after parsing, so the error names the type."""
        return {"text": {"text": self.text}, "tool_use": {"id": self.id, "name": self.name, "input": self.input},
                "tool_result": {"tool_use_id": self.tool_use_id}, "thinking": {"thinking": self.thinking},
                "redacted_thinking": {"data": self.data}}[self.type]


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["user", "assistant"]
    content: Text | list[ContentBlock]


class SystemBlock(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: Text
    cache_control: dict[str, Any] | None = None  # ignored, as on content blocks
    citations: list[Any] | None = None


class Tool(BaseModel):
    """A client tool: the model calls it, the client runs it. ``type`` "custom" (or absent) only."""

    model_config = _STRICT
    name: Text = Field(min_length=1, max_length=128)
    description: Text | None = None
    input_schema: dict[str, Any] | None = None  # required, checked after "type" (a server tool has none)
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None  # ignored
    strict: bool | None = None  # a forced call always follows the schema; otherwise the template shows it
    eager_input_streaming: bool | None = None  # input is always streamed as it is generated
    input_examples: list[dict[str, Any]] | None = None  # ignored: templates have no place for examples
    defer_loading: bool | None = None  # ignored: no tool search here, every tool is in the prompt

    @field_validator("type", mode="before")
    @classmethod
    def _server_tools_refused(cls, value: Any) -> Any:
        if value not in (None, "custom"):
            raise ValueError(f"tool type {value!r} is a tool Anthropic's servers run; this server runs none: "
                             "declare client tools only ({name, description, input_schema})")
        return value

    @model_validator(mode="after")
    def _has_a_schema(self) -> Tool:
        if self.input_schema is None:
            raise ValueError(f'tool {self.name!r} needs "input_schema" (a JSON schema of its input object)')
        return self


class ToolChoice(BaseModel):
    model_config = _STRICT
    type: Literal["auto", "any", "tool", "none"]
    name: Text | None = None  # type "tool"
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name_for_tool(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError('"name" goes with type "tool" (and only with it)')
        return self


class Thinking(BaseModel):
    model_config = _STRICT
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)  # not enforced: thinking counts against max_tokens
    display: Literal["summarized", "omitted"] | None = None


class JsonOutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    model_config = _STRICT
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class Metadata(BaseModel):
    model_config = _STRICT
    user_id: Text | None = None  # ignored: a local server keeps no per-user records


class PromptFields(BaseModel):
    """What makes the prompt: shared by /v1/messages and /v1/messages/count_tokens."""

    model_config = _STRICT
    model: Text
    messages: list[Message] = Field(min_length=1)
    system: Text | list[SystemBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    cache_control: dict[str, Any] | None = None  # ignored (automatic prefix caching)
    context_management: dict[str, Any] | None = None  # Claude Code's; ignored: the client keeps its context

    @field_validator("messages", mode="before")
    @classmethod
    def _few_messages(cls, value: Any) -> Any:
        return check_message_count(value)


class MessagesRequest(PromptFields):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[Text] | None = None
    stream: bool = False
    # Newer Anthropic clients no longer send these (its newest models fix them); older ones and other
    # clients do, and they are honoured as on /v1/chat/completions.
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None
    metadata: Metadata | None = None
    # Accepted and ignored: one service tier, one speed and one place of inference here, no workspaces
    service_tier: Literal["auto", "standard_only"] | None = None
    speed: Literal["standard", "fast"] | None = None
    inference_geo: Text | None = None
    user_profile_id: Text | None = None
    workspace_id: Text | None = None
    diagnostics: dict[str, Any] | None = None  # Anthropic's prompt-cache diagnostics: none to report

    @field_validator("stop_sequences")
    @classmethod
    def _few_non_empty_stops(cls, value: list[str] | None) -> list[str] | None:
        if value and any(not stop for stop in value):
            raise ValueError("a stop sequence must not be empty")
        if value and len(value) > MAX_STOP_STRINGS:
            raise ValueError(f"{len(value)} stop sequences; at most {MAX_STOP_STRINGS} are supported (each one is "
                             "scanned for in every piece of output): send the ones that matter")
        return value


class CountTokensRequest(PromptFields):
    pass
