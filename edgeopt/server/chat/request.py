"""The chat request every API face translates into: edgeopt's own typed model, no vendor's wire schema.

A face (OpenAI chat, Responses, Anthropic Messages, Ollama) validates its own body, then builds a
:class:`ChatRequest`; from there one path renders the template, plans tools and grammars, tokenizes and
reads the reply (edgeopt.server.chat.prepare). Messages keep the shape Hugging Face chat templates read
(``role``, ``content``, ``tool_calls`` with ``function.name`` / ``function.arguments``, ``reasoning_content``),
since that is what the model's own template was written for.

Errors raised on the shared path blame a field by the face's own name for it (:class:`FieldNames`): a
too-long prompt is ``input`` on /v1/responses, ``messages`` on /v1/chat/completions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# Every message costs Python work (validation, jinja2 rendering) before the prompt's length is known: cap
# them. Far above real conversations (an agent session of a few hundred turns), far below the 100k tiny
# messages a 4 MiB body can carry. Checked before the messages are validated one by one.
MAX_CHAT_MESSAGES = 2048


def check_message_count(value: Any, noun: str = "messages", fix: str = "summarize or drop older turns") -> Any:
    """Each face's schema calls this on its list of turns before validating them one by one."""
    if isinstance(value, list) and len(value) > MAX_CHAT_MESSAGES:
        raise ValueError(f"{len(value)} {noun} in one request; at most {MAX_CHAT_MESSAGES} are allowed: send fewer "
                         f"({fix})")
    return value
# The efforts templates read (gpt-oss's reasoning_effort; "none" also switches Qwen3's enable_thinking off).
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]


@dataclass(frozen=True)
class ToolCall:
    """A call an earlier assistant turn made, as the conversation carries it back."""

    name: str
    arguments: Any = "{}"  # an object, or the JSON text the client sent (decoded for the template when it is JSON)
    id: str | None = None

    def template_dict(self) -> dict[str, Any]:
        """Templates write ``tool_call.arguments | tojson`` (Qwen, Llama 3.1) or iterate its items: they
        expect an object, as transformers passes it. A JSON text is decoded when it is one."""
        arguments = self.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError):
                pass  # not JSON (or nested past Python's stack): the template gets the text as it came
        call: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": arguments}}
        if self.id is not None:
            call["id"] = self.id
        return call


@dataclass(frozen=True)
class Message:
    role: str  # system, developer, user, assistant, tool (faces map their own roles onto these)
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # a tool turn: the call it answers
    name: str | None = None  # a tool turn: the function's name, for templates that label results by it
    reasoning: str | None = None  # an assistant turn's earlier thinking (templates read reasoning_content)
    extra: Mapping[str, Any] = field(default_factory=dict)  # other fields a template may read, passed through

    def template_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {**self.extra, "role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.template_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        if self.reasoning is not None:
            data["reasoning_content"] = self.reasoning
        return data


@dataclass(frozen=True)
class Function:
    """A tool the model may call."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None  # a JSON schema; None means "no arguments"
    strict: bool | None = None  # arguments always follow the schema when a call is enforced

    def parameters_schema(self) -> dict[str, Any]:
        return dict(self.parameters) if self.parameters is not None else {"type": "object", "properties": {}}


@dataclass(frozen=True)
class NamedTool:
    """``tool_choice`` naming one function: the reply must call it."""

    name: str


ToolChoice = Literal["none", "auto", "required"] | NamedTool


@dataclass(frozen=True)
class OutputFormat:
    """A constraint on the answer: any JSON object, or JSON following ``schema``; ``param`` is the face's name
    of the field (a schema the constraint engine refuses is blamed on it)."""

    kind: Literal["json_object", "json_schema"]
    schema: Mapping[str, Any] | None = None
    param: str = "response_format"


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn. Parsed, not range-checked: the engine validates once (edgeopt.engine.validation)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[str, float] | None = None  # token id (as text) -> bias
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


@dataclass(frozen=True)
class FieldNames:
    """The face's names of the fields the shared path may blame in an error."""

    prompt: str = "messages"
    output_limit: str = "max_tokens"
    tools: str = "tools"
    tool_choice: str = "tool_choice"
    reasoning: str = "reasoning_effort"


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling = Sampling()
    max_tokens: int | None = None  # None: whatever the context leaves after the prompt
    tools: tuple[Function, ...] = ()
    tool_choice: ToolChoice | None = None  # None: "auto" when there are tools
    parallel_tool_calls: bool = True
    output_format: OutputFormat | None = None
    reasoning_effort: ReasoningEffort | None = None  # None: the template's own default
    top_logprobs: int | None = None  # None: no logprobs; 0: the chosen token's only
    add_generation_prompt: bool = True
    names: FieldNames = FieldNames()


@dataclass(frozen=True)
class RawRequest:
    """A prompt sent as it is, no template (OpenAI's /v1/completions, Ollama's raw generate): control-token
    text in it is parsed, since the client owns the whole prompt and writes its own markup."""

    model: str
    prompt: str | list[int]  # text, or token ids
    sampling: Sampling = Sampling()
    max_tokens: int | None = None
    default_max_tokens: int | None = None  # when max_tokens is None (None: what the context leaves)
    output_format: OutputFormat | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    names: FieldNames = FieldNames(prompt="prompt")
