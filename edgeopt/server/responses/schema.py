"""The request body of POST /v1/responses (OpenAI's Responses API), as strict pydantic models.

Only what this server can honour is accepted; docs/api-responses.md lists every field. Items and parts
that the official clients send back from an earlier response (an output message with ``annotations`` and
``logprobs``, a function call with its ``id`` and ``status``) are declared so they round-trip; built-in
tools (``web_search``, ``local_shell``, ``custom`` ...) and media parts are refused by name: this server
runs no tools of its own and its models read text only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgeopt.server.chat.request import OutputFormat, check_message_count
from edgeopt.server.http.text_fields import Text

_STRICT = ConfigDict(extra="forbid", strict=True)
_MEDIA_PARTS = {"input_image": "images are", "input_file": "files are", "input_audio": "audio is"}
# ``include`` values: the first is honoured (logprobs of the output text); reasoning's encrypted content is
# the reasoning text itself (nothing here is encrypted, see docs/api-responses.md); the others ask for
# results of built-in tools, which are refused in ``tools``, so there is never anything to include.
INCLUDE_VALUES = ("message.output_text.logprobs", "reasoning.encrypted_content", "file_search_call.results",
                  "web_search_call.results", "web_search_call.action.sources", "message.input_image.image_url",
                  "computer_call_output.output.image_url", "code_interpreter_call.outputs")


class TextPart(BaseModel):
    """``input_text`` / ``output_text`` (with what an earlier output carried) / ``refusal``."""

    model_config = _STRICT
    type: Literal["input_text", "output_text", "refusal", "summary_text", "reasoning_text"]
    text: Text | None = None
    refusal: Text | None = None
    annotations: list[Any] | None = None  # an earlier output's: citations of built-in tools, never ours
    logprobs: list[Any] | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _media_refused(cls, value: Any) -> Any:
        if value in _MEDIA_PARTS:
            raise ValueError(f"{_MEDIA_PARTS[value]} not supported by this model (a part of type {value!r}); "
                             'send text only: a string, or parts {"type": "input_text", "text": ...}')
        return value

    @model_validator(mode="after")
    def _has_text(self) -> TextPart:
        if (self.refusal if self.type == "refusal" else self.text) is None:
            raise ValueError(f'a part of type {self.type!r} needs "{"refusal" if self.type == "refusal" else "text"}"')
        return self

    def plain(self) -> str:
        return (self.refusal if self.type == "refusal" else self.text) or ""


class MessageItem(BaseModel):
    model_config = _STRICT
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | list[TextPart]
    id: Text | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    # OpenAI's models label their messages; clients send the label back (Codex does). It names no text.
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.plain() for p in self.content)


class FunctionCallItem(BaseModel):
    model_config = _STRICT
    type: Literal["function_call"]
    call_id: Text
    name: Text
    arguments: Text
    id: Text | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(BaseModel):
    model_config = _STRICT
    type: Literal["function_call_output"]
    call_id: Text
    output: Text | list[TextPart]
    id: Text | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.plain() for p in self.output)


class ReasoningItem(BaseModel):
    """An earlier response's reasoning, sent back: its text goes to the template as the assistant turn's
    ``reasoning_content`` (templates that show past thinking read it; the others drop it)."""

    model_config = _STRICT
    type: Literal["reasoning"]
    id: Text | None = None
    summary: list[TextPart] = Field(default_factory=list)
    content: list[TextPart] | None = None
    encrypted_content: Text | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


InputItem = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem,
                      Field(discriminator="type")]
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


class FunctionTool(BaseModel):
    model_config = _STRICT
    type: Literal["function"]
    name: Text = Field(min_length=1, max_length=64)
    description: Text | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # an enforced call always follows the schema; accepted


class NamedFunctionChoice(BaseModel):
    model_config = _STRICT
    type: Literal["function"]
    name: Text


class TextFormat(BaseModel):
    """``text.format``: ``{"type": "text"}``, ``{"type": "json_object"}`` or the json_schema fields inline."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: Text | None = None
    description: Text | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_named(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise ValueError('text.format of type "json_schema" needs "name" and "schema"')
        return self

    def output_format(self) -> OutputFormat | None:
        """The neutral output format (None: free text)."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return OutputFormat("json_object", param="text.format")
        return OutputFormat("json_schema", self.schema_, param="text.format.schema")


class TextOptions(BaseModel):
    model_config = _STRICT
    format: TextFormat | None = None
    # "medium" is every model's only verbosity here; another value would be a promise nobody keeps.
    verbosity: Literal["medium"] | None = None


class ReasoningOptions(BaseModel):
    model_config = _STRICT
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    # How much of the thinking to show: the whole thinking is always returned (there is no summarizer).
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_obfuscation: bool | None = None  # padding against length side channels: accepted, not added


class ResponsesRequest(BaseModel):
    model_config = _STRICT

    model: Text
    input: Text | list[InputItem]
    instructions: Text | None = None
    previous_response_id: Text | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunctionChoice | None = None
    parallel_tool_calls: bool = True
    text: TextOptions | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    reasoning: ReasoningOptions | None = None
    metadata: dict[str, Text] | None = None
    store: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    include: list[Literal[INCLUDE_VALUES]] | None = None  # type: ignore[valid-type]
    truncation: Literal["disabled"] | None = None  # "auto" would drop turns silently; a too-long prompt is a 400
    seed: int | None = None  # an extension (as on chat): reproducible sampling
    # Sent by clients and agent frameworks; accepted and ignored (one service tier, one local user).
    user: Text | None = None
    service_tier: Text | None = None
    prompt_cache_key: Text | None = None  # the prefix cache needs no key: any shared prefix is reused
    safety_identifier: Text | None = None
    client_metadata: dict[str, Text] | None = None  # Codex's telemetry labels for OpenAI's backend

    @field_validator("input", mode="before")
    @classmethod
    def _items_typed(cls, value: Any) -> Any:
        """Messages may omit ``type`` (the clients' "easy" form); other types are refused by name."""
        if not isinstance(value, list):
            return value
        check_message_count(value, "input items", "or chain turns with previous_response_id")
        items = []
        for i, item in enumerate(value):
            if isinstance(item, dict) and "type" not in item and "role" in item:
                item = {**item, "type": "message"}
            kind = item.get("type") if isinstance(item, dict) else None
            if isinstance(kind, str) and kind not in _ITEM_TYPES:
                raise ValueError(f"input[{i}] has type {kind!r}, which this server does not take: it takes "
                                 f"{', '.join(_ITEM_TYPES)} items (built-in tools and item references are not "
                                 "supported; send the items themselves)")
            items.append(item)
        return items

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools_only(cls, value: Any) -> Any:
        for i, tool in enumerate(value if isinstance(value, list) else []):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if isinstance(kind, str) and kind != "function":
                raise ValueError(f"tools[{i}] has type {kind!r}, a built-in tool this server cannot run; send "
                                 'function tools ({"type": "function", "name": ..., "parameters": ...}) and run '
                                 "them in the client (Codex: turn off web_search and use a model family without "
                                 "local_shell or freeform apply_patch; see docs/api-responses.md)")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _function_choice_only(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise ValueError(f"tool_choice has type {kind!r}; this server takes \"none\", \"auto\", \"required\" or "
                             '{"type": "function", "name": ...}')
        return value
