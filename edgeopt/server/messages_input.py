"""A Messages request (Anthropic) -> the chat request the chat path runs (edgeopt.server.chat_prep).

The Messages API is another spelling of a chat: ``system`` is the system message; a user turn's
``tool_result`` blocks are ``tool`` turns (before the turn's text, where Anthropic puts them); an assistant
turn's ``tool_use`` blocks are its ``tool_calls`` and its ``thinking`` blocks its ``reasoning_content`` (the
field thinking templates read back); ``tool_choice`` any / tool / none are required / a named function /
none, enforced by the same grammar as on /v1/chat/completions; ``thinking`` switches the template's
thinking, and ``output_config.format`` is ``response_format``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from edgeopt.errors import RequestError
from edgeopt.server.errors import describe_validation_errors
from edgeopt.server.messages_schema import ContentBlock, Message, MessagesRequest, PromptFields
from edgeopt.server.reasoning_syntax import ReasoningFormat
from edgeopt.server.schemas import ChatCompletionRequest

# Anthropic's efforts above "high" are still "high" for templates that read reasoning_effort (gpt-oss)
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def translate(body: PromptFields, reasoning: ReasoningFormat | None) -> ChatCompletionRequest:
    """``reasoning``: the served model's (None: it does not think), to refuse switching off what cannot be."""
    fields: dict[str, Any] = {"model": body.model, "messages": chat_messages(body)}
    if body.tools:
        fields["tools"] = [{"type": "function", "function": {
            "name": tool.name, "parameters": tool.parameters_schema(),
            **({"description": tool.description} if tool.description is not None else {})}} for tool in body.tools]
    if body.tool_choice is not None:
        choice = body.tool_choice
        if choice.type in ("any", "tool") and not body.tools:
            raise RequestError(f'tool_choice {{"type": "{choice.type}"}} asks for a tool call, but the request has '
                               "no tools", 'send the tools in "tools", or drop tool_choice', param="tool_choice")
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or \
            {"type": "function", "function": {"name": choice.name}}
        if choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    effort = _reasoning_effort(body, reasoning)
    if effort is not None:
        fields["reasoning_effort"] = effort
    if body.output_config is not None and body.output_config.format is not None:
        fields["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": body.output_config.format.schema_}}
    if isinstance(body, MessagesRequest):
        # No max_completion_tokens: the chat path then allows what the context leaves after the prompt, and
        # the route caps that at max_tokens (a larger max_tokens is no error: see routes_messages).
        fields.update(stream=body.stream, temperature=body.temperature, stop=body.stop_sequences)
        if body.top_p is not None:
            fields["top_p"] = body.top_p
        if body.top_k is not None:
            fields["top_k"] = body.top_k
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:  # the blocks were valid one by one; this names what did not translate
        message, param = describe_validation_errors(exc.errors(include_url=False))
        raise RequestError(f"the request does not translate into a chat: {message}",
                           "check the messages and tools", param=param) from None


def _reasoning_effort(body: PromptFields, reasoning: ReasoningFormat | None) -> str | None:
    """``thinking`` disabled -> "none"; enabled or adaptive -> output_config.effort, else "medium"; absent ->
    the template's own default (None). A template that always thinks cannot be switched off: a 400."""
    thinking = body.thinking
    effort = body.output_config.effort if body.output_config is not None else None
    if thinking is not None and thinking.type == "disabled":
        if reasoning is not None and not reasoning.syntax.can_switch_off:
            raise RequestError('thinking {"type": "disabled"} asks for no thinking, but this model\'s chat template '
                               "always thinks (it has no enable_thinking switch)", 'drop "thinking": the thinking '
                               "comes back apart from the answer, in thinking blocks", param="thinking")
        return "none"
    if thinking is not None or effort is not None:
        return _EFFORTS[effort or "medium"]
    return None


def chat_messages(body: PromptFields) -> list[dict[str, Any]]:
    system = body.system_text()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
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
    return messages


def _blocks(message: Message) -> list[ContentBlock]:
    if isinstance(message.content, str):
        return [ContentBlock(type="text", text=message.content)]
    return message.content


def _assistant_turn(message: Message, call_names: dict[str, str]) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": ""}
    text, thinking, calls = [], [], []
    for block in _blocks(message):
        if block.type == "text":
            text.append(block.text or "")
        elif block.type == "thinking":
            thinking.append(block.thinking or "")
        elif block.type == "tool_use":
            call_names[block.id or ""] = block.name or ""
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        # redacted_thinking: opaque data of Anthropic's models, nothing a local template can show
    turn["content"] = "\n".join(text)
    if thinking:
        turn["reasoning_content"] = "\n".join(thinking)
    if calls:
        turn["tool_calls"] = calls
    return turn


def _user_turns(message: Message, call_names: dict[str, str]) -> list[dict[str, Any]]:
    """A user message: a ``tool`` turn per tool_result, then the text (if any) as one user turn."""
    turns: list[dict[str, Any]] = []
    text: list[str] = []
    for block in _blocks(message):
        if block.type == "tool_result":
            result = block.plain_text()
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": block.tool_use_id,
                                    "content": f"Error: {result}" if block.is_error else result}
            if block.tool_use_id in call_names:
                tool["name"] = call_names[block.tool_use_id]  # templates that label a result by function read it
            turns.append(tool)
        elif block.type == "text":
            text.append(block.text or "")
    if text or not turns:
        turns.append({"role": "user", "content": "\n".join(text)})
    return turns
