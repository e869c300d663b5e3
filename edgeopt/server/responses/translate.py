"""A Responses request (and the stored conversation it continues) -> the neutral chat request.

The Responses API is another spelling of a chat: ``instructions`` is the system message, input items are
turns (consecutive ``function_call`` items join the assistant turn before them, as one message with tool
calls; ``function_call_output`` is a ``tool`` turn), ``text.format`` is the output format and
``max_output_tokens`` the output limit. One neutral request keeps one engine path for every face
(edgeopt.server.chat.prepare): same template, tools, grammar and prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.errors import RequestError
from edgeopt.server.chat.request import (
    ChatRequest,
    FieldNames,
    Function,
    Message,
    NamedTool,
    Sampling,
    ToolCall,
    ToolChoice,
)
from edgeopt.server.responses.schema import (
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# OpenAI's developer role is the system role of models that predate it; templates know only "system"
# (Qwen's skips a "developer" turn without a word).
_ROLES = {"developer": "system"}
NAMES = FieldNames(prompt="input", output_limit="max_output_tokens", reasoning="reasoning.effort")


@dataclass(frozen=True)
class ChatTranslation:
    request: ChatRequest
    conversation: tuple[Message, ...]  # the turns without the instructions: what a stored response keeps


def translate(body: ResponsesRequest, history: tuple[Message, ...]) -> ChatTranslation:
    """``history``: the stored conversation ``previous_response_id`` names (() without one)."""
    conversation = (*history, *input_messages(body.input))
    if not conversation and not body.instructions:
        raise RequestError("input has no items and there are no instructions: there is nothing to answer",
                           'send input as a string or a list of items such as {"role": "user", "content": ...}',
                           param="input")
    system = (Message("system", body.instructions),) if body.instructions else ()
    logprobs = LOGPROBS_INCLUDE in (body.include or ())
    if body.top_logprobs is not None and not logprobs:
        raise RequestError(f"top_logprobs={body.top_logprobs} but the output's logprobs were not asked for",
                           f'add "{LOGPROBS_INCLUDE}" to include', param="top_logprobs")
    if logprobs and body.tools and body.tool_choice != "none":
        raise RequestError(f'include "{LOGPROBS_INCLUDE}" is not supported together with tools',
                           "drop the logprobs from include, or send the request without tools", param="include")
    sampling = Sampling(temperature=1.0 if body.temperature is None else body.temperature,
                        top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed)
    text_format = body.text.format if body.text is not None else None
    request = ChatRequest(
        model=body.model, messages=(*system, *conversation), sampling=sampling, max_tokens=body.max_output_tokens,
        tools=tuple(Function(t.name, t.description, t.parameters, t.strict) for t in body.tools or ()),
        tool_choice=_tool_choice(body), parallel_tool_calls=body.parallel_tool_calls,
        output_format=text_format.output_format() if text_format is not None and not _forces_a_call(body) else None,
        reasoning_effort=body.reasoning.effort if body.reasoning is not None else None,
        top_logprobs=(body.top_logprobs or 0) if logprobs else None, names=NAMES)
    return ChatTranslation(request, conversation)


def _tool_choice(body: ResponsesRequest) -> ToolChoice | None:
    choice = body.tool_choice
    return choice if choice is None or isinstance(choice, str) else NamedTool(choice.name)


def _forces_a_call(body: ResponsesRequest) -> bool:
    """``tool_choice`` "required" or a named function: this turn's output is a call, so ``text.format``
    (the shape of a text answer) has nothing to shape. Agents send both: the Agents SDK forces the first
    call and keeps its output type's format for the answer that follows the tool's result."""
    return bool(body.tools) and body.tool_choice not in (None, "auto", "none")


def input_messages(items: str | list[Any]) -> list[Message]:
    """Input items -> chat messages, in order."""
    if isinstance(items, str):
        return [Message("user", items)]
    messages: list[Message] = []
    call_names: dict[str, str] = {}
    reasoning: list[str] = []  # thinking of the assistant turn that follows it
    for item in items:
        if isinstance(item, ReasoningItem):
            reasoning.append(_reasoning_text(item))
        elif isinstance(item, MessageItem):
            thought = "\n".join(reasoning) if item.role == "assistant" and reasoning else None
            if item.role == "assistant":
                reasoning = []
            messages.append(Message(_ROLES.get(item.role, item.role), item.text(), reasoning=thought))
        elif isinstance(item, FunctionCallItem):
            call_names[item.call_id] = item.name
            turn = messages.pop() if messages and messages[-1].role == "assistant" else Message("assistant")
            thought = turn.reasoning if turn.reasoning is not None else ("\n".join(reasoning) if reasoning else None)
            reasoning = []
            call = ToolCall(item.name, item.arguments, item.call_id)
            messages.append(Message("assistant", turn.content, (*turn.tool_calls, call), reasoning=thought))
        elif isinstance(item, FunctionCallOutputItem):
            # templates that label a result by its function read its name
            messages.append(Message("tool", item.text(), tool_call_id=item.call_id, name=call_names.get(item.call_id)))
    return messages


def _reasoning_text(item: ReasoningItem) -> str:
    """The thinking an earlier response returned: its content, else its summary, else its
    ``encrypted_content`` (this server's is the thinking as plain text: output.py says why)."""
    parts = item.content if item.content else item.summary
    return "".join(part.plain() for part in parts) or item.encrypted_content or ""
