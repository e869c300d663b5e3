"""A Messages request (Anthropic) -> the neutral chat request (edgeopt.server.chat.request).

The Messages API is another spelling of a chat: ``system`` is the system message; a user turn's
``tool_result`` blocks are ``tool`` turns (before the turn's text, where Anthropic puts them); an assistant
turn's ``tool_use`` blocks are its tool calls and its ``thinking`` blocks its earlier reasoning (the field
thinking templates read back); ``tool_choice`` any / tool / none are required / a named function / none,
enforced by the same grammar as every face's; ``thinking`` switches the template's thinking, and
``output_config.format`` is the output format.
"""

from __future__ import annotations

import json

from edgeopt.errors import RequestError
from edgeopt.server.anthropic.schema import Message, MessagesRequest, PromptFields
from edgeopt.server.chat.request import (
    ChatRequest,
    FieldNames,
    Function,
    NamedTool,
    OutputFormat,
    ReasoningEffort,
    Sampling,
    ToolCall,
    ToolChoice,
)
from edgeopt.server.chat.request import Message as ChatMessage

# Anthropic's efforts above "high" are still "high" for templates that read reasoning_effort (gpt-oss)
_EFFORTS: dict[str, ReasoningEffort] = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high",
                                        "max": "high"}
NAMES = FieldNames(prompt="messages", output_limit="max_tokens", reasoning="thinking")


def translate(body: PromptFields) -> ChatRequest:
    """No output limit: the chat path then allows what the context leaves after the prompt, and the route caps
    that at max_tokens (a larger max_tokens is no error: see anthropic/routes.py)."""
    tool_choice, parallel = _tool_choice(body)
    sampling = Sampling()
    if isinstance(body, MessagesRequest):
        sampling = Sampling(temperature=body.temperature, top_p=1.0 if body.top_p is None else body.top_p,
                            top_k=body.top_k or 0, stop=tuple(body.stop_sequences or ()))
    output_format = None
    if body.output_config is not None and body.output_config.format is not None:
        output_format = OutputFormat("json_schema", body.output_config.format.schema_,
                                     param="output_config.format.schema")
    return ChatRequest(
        model=body.model, messages=chat_messages(body), sampling=sampling,
        tools=tuple(Function(tool.name, tool.description, tool.input_schema) for tool in body.tools or ()),
        tool_choice=tool_choice, parallel_tool_calls=parallel, output_format=output_format,
        reasoning_effort=_reasoning_effort(body), names=NAMES)


def _tool_choice(body: PromptFields) -> tuple[ToolChoice | None, bool]:
    choice = body.tool_choice
    if choice is None:
        return None, True
    if choice.type in ("any", "tool") and not body.tools:
        raise RequestError(f'tool_choice {{"type": "{choice.type}"}} asks for a tool call, but the request has '
                           "no tools", 'send the tools in "tools", or drop tool_choice', param="tool_choice")
    wire_choices: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}
    neutral = wire_choices[choice.type] if choice.type in wire_choices else NamedTool(choice.name or "")
    return neutral, not choice.disable_parallel_tool_use


def _reasoning_effort(body: PromptFields) -> ReasoningEffort | None:
    """``thinking`` disabled -> "none"; enabled or adaptive -> output_config.effort, else "medium"; absent ->
    the template's own default (None). A template that always thinks cannot be switched off: the chat core
    refuses "none" there, naming ``thinking``."""
    thinking = body.thinking
    effort = body.output_config.effort if body.output_config is not None else None
    if thinking is not None and thinking.type == "disabled":
        return "none"
    if thinking is not None or effort is not None:
        return _EFFORTS[effort or "medium"]
    return None


def chat_messages(body: PromptFields) -> tuple[ChatMessage, ...]:
    system = body.system if isinstance(body.system, str) else "\n\n".join(b.text for b in body.system or ())
    messages: list[ChatMessage] = [ChatMessage("system", system)] if system else []
    call_names: dict[str, str] = {}
    for i, message in enumerate(body.messages):
        if message.role == "assistant":
            if i == len(body.messages) - 1:
                raise RequestError("the last message is the assistant's: continuing a prefilled answer is not "
                                   "supported here", "end the messages with a user turn",
                                   param=f"messages.{i}")
            messages.append(_assistant_turn(message, call_names))
        else:
            messages += _user_turns(message, call_names)
    return tuple(messages)


def _assistant_turn(message: Message, call_names: dict[str, str]) -> ChatMessage:
    if isinstance(message.content, str):
        return ChatMessage("assistant", message.content)
    text, thinking, calls = [], [], []
    for block in message.content:
        if block.type == "text":
            text.append(block.text or "")
        elif block.type == "thinking":
            thinking.append(block.thinking or "")
        elif block.type == "tool_use":
            call_names[block.id or ""] = block.name or ""
            calls.append(ToolCall(block.name or "", json.dumps(block.input, ensure_ascii=False), block.id))
        # redacted_thinking: opaque data of Anthropic's models, nothing a local template can show
    return ChatMessage("assistant", "\n".join(text), tool_calls=tuple(calls),
                       reasoning="\n".join(thinking) if thinking else None)


def _user_turns(message: Message, call_names: dict[str, str]) -> list[ChatMessage]:
    """A user message: a ``tool`` turn per tool_result, then the text (if any) as one user turn."""
    if isinstance(message.content, str):
        return [ChatMessage("user", message.content)]
    turns: list[ChatMessage] = []
    text: list[str] = []
    for block in message.content:
        if block.type == "tool_result":
            content = block.content
            result = "".join(b.text or "" for b in content) if isinstance(content, list) else content or ""
            # templates that label a result by its function read its name
            turns.append(ChatMessage("tool", f"Error: {result}" if block.is_error else result,
                                     tool_call_id=block.tool_use_id, name=call_names.get(block.tool_use_id or "")))
        elif block.type == "text":
            text.append(block.text or "")
    if text or not turns:
        turns.append(ChatMessage("user", "\n".join(text)))
    return turns
