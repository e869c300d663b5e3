"""A Responses request (and the stored conversation it continues) -> the chat request the chat path runs.

The Responses API is another spelling of a chat: ``instructions`` is the system message, input items are
turns (consecutive ``function_call`` items join the assistant turn before them, as one chat message with
``tool_calls``; ``function_call_output`` is a ``tool`` turn), ``text.format`` is ``response_format`` and
``max_output_tokens`` is ``max_completion_tokens``. Translating into :class:`ChatCompletionRequest` keeps
one engine path for both APIs (edgeopt.server.chat_prep): same template, tools, grammar and prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from edgeopt.errors import RequestError
from edgeopt.server.errors import describe_validation_errors
from edgeopt.server.responses_schema import (FunctionCallItem, FunctionCallOutputItem, MessageItem, ReasoningItem,
                                             ResponsesRequest)
from edgeopt.server.schemas import ChatCompletionRequest

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# OpenAI's developer role is the system role of models that predate it; templates know only "system"
# (Qwen's skips a "developer" turn without a word).
_ROLES = {"developer": "system"}


@dataclass(frozen=True)
class ChatTranslation:
    request: ChatCompletionRequest
    conversation: list[dict[str, Any]]  # the turns without the instructions: what a stored response keeps


def translate(body: ResponsesRequest, history: list[dict[str, Any]]) -> ChatTranslation:
    """``history``: the stored conversation ``previous_response_id`` names ([] without one)."""
    conversation = [*history, *input_messages(body.input)]
    if not conversation and not body.instructions:
        raise RequestError("input has no items and there are no instructions: there is nothing to answer",
                           'send input as a string or a list of items such as {"role": "user", "content": ...}',
                           param="input")
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    logprobs = body.wants(LOGPROBS_INCLUDE)
    if body.top_logprobs is not None and not logprobs:
        raise RequestError(f"top_logprobs={body.top_logprobs} but the output's logprobs were not asked for",
                           f'add "{LOGPROBS_INCLUDE}" to include', param="top_logprobs")
    if logprobs and body.tools and body.tool_choice != "none":
        raise RequestError(f'include "{LOGPROBS_INCLUDE}" is not supported together with tools',
                           "drop the logprobs from include, or send the request without tools", param="include")
    fields: dict[str, Any] = {
        "model": body.model, "messages": [*system, *conversation], "stream": body.stream,
        "max_completion_tokens": body.max_output_tokens, "parallel_tool_calls": body.parallel_tool_calls,
        "logprobs": logprobs, "top_logprobs": body.top_logprobs if logprobs else None, "seed": body.seed,
    }
    if body.temperature is not None:
        fields["temperature"] = body.temperature
    if body.top_p is not None:
        fields["top_p"] = body.top_p
    if body.tools:
        fields["tools"] = [{"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
                           for tool in body.tools]
    if body.tool_choice is not None:
        choice = body.tool_choice
        fields["tool_choice"] = choice if isinstance(choice, str) else {"type": "function",
                                                                         "function": {"name": choice.name}}
    if body.text is not None and body.text.format is not None and not _forces_a_call(body):
        fields["response_format"] = body.text.format.chat_response_format()
    if body.reasoning is not None and body.reasoning.effort is not None:
        fields["reasoning_effort"] = body.reasoning.effort
    try:
        request = ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:  # the items were valid one by one; this names what did not translate
        message, param = describe_validation_errors(exc.errors(include_url=False))
        raise RequestError(f"the request does not translate into a chat: {message}",
                           "check the input items and tools", param=param) from None
    return ChatTranslation(request, conversation)


def _forces_a_call(body: ResponsesRequest) -> bool:
    """``tool_choice`` "required" or a named function: this turn's output is a call, so ``text.format``
    (the shape of a text answer) has nothing to shape. Agents send both: the Agents SDK forces the first
    call and keeps its output type's format for the answer that follows the tool's result."""
    return bool(body.tools) and body.tool_choice not in (None, "auto", "none")


def input_messages(items: str | list[Any]) -> list[dict[str, Any]]:
    """Input items -> chat messages, in order."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    reasoning: list[str] = []  # thinking of the assistant turn that follows it
    for item in items:
        if isinstance(item, ReasoningItem):
            reasoning.append(_reasoning_text(item))
        elif isinstance(item, MessageItem):
            message: dict[str, Any] = {"role": _ROLES.get(item.role, item.role), "content": item.text()}
            if item.role == "assistant" and reasoning:
                message["reasoning_content"] = "\n".join(reasoning)
            if item.role == "assistant":
                reasoning = []
            messages.append(message)
        elif isinstance(item, FunctionCallItem):
            call_names[item.call_id] = item.name
            turn = _assistant_turn(messages)
            if turn is None:
                turn = {"role": "assistant", "content": ""}
                messages.append(turn)
            if reasoning and "reasoning_content" not in turn:
                turn["reasoning_content"] = "\n".join(reasoning)
            reasoning = []
            turn.setdefault("tool_calls", []).append(
                {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}})
        elif isinstance(item, FunctionCallOutputItem):
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": item.call_id, "content": item.text()}
            if item.call_id in call_names:
                tool["name"] = call_names[item.call_id]  # templates that label a result by function read it
            messages.append(tool)
    return messages


def _assistant_turn(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The assistant message a function call joins: the last message, when it is the assistant's."""
    return messages[-1] if messages and messages[-1]["role"] == "assistant" else None


def _reasoning_text(item: ReasoningItem) -> str:
    """The thinking an earlier response returned: its content, else its summary, else its
    ``encrypted_content`` (this server's is the thinking as plain text: responses_output says why)."""
    parts = item.content if item.content else item.summary
    return "".join(part.plain() for part in parts) or item.encrypted_content or ""
