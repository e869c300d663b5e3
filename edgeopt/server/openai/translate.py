"""An OpenAI chat body (/v1/chat/completions) -> the neutral chat request (edgeopt.server.chat.request), and
the sampling fields it shares with /v1/completions -> the neutral Sampling."""

from __future__ import annotations

from edgeopt.engine.validation import chat_logprob_count
from edgeopt.errors import RequestError
from edgeopt.server.chat.request import (
    ChatRequest,
    Function,
    Message,
    NamedTool,
    OutputFormat,
    Sampling,
    ToolCall,
    ToolChoice,
)
from edgeopt.server.openai.schema import (
    ChatCompletionRequest,
    ChatMessage,
    GenerationFields,
    ResponseFormat,
)
from edgeopt.server.openai.tool_schema import NamedToolChoice
from edgeopt.server.openai.tool_schema import ToolChoice as WireToolChoice

_MEDIA_REFUSALS = {"image_url": "images are", "input_audio": "audio is", "file": "files are"}


def chat_request(body: ChatCompletionRequest) -> ChatRequest:
    _refuse_media_parts(body)
    return ChatRequest(
        model=body.model, messages=tuple(_message(m) for m in body.messages), sampling=sampling(body),
        max_tokens=body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens,
        tools=tuple(Function(t.function.name, t.function.description, t.function.parameters, t.function.strict)
                    for t in body.tools or ()),
        tool_choice=tool_choice(body.tool_choice), parallel_tool_calls=body.parallel_tool_calls,
        output_format=output_format(body.response_format), reasoning_effort=body.reasoning_effort,
        top_logprobs=chat_logprob_count(body.logprobs, body.top_logprobs),
        add_generation_prompt=body.add_generation_prompt)


def sampling(body: GenerationFields) -> Sampling:
    return Sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, min_p=body.min_p,
                    seed=body.seed, repetition_penalty=body.repetition_penalty,
                    presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
                    logit_bias=body.logit_bias, stop=_stops(body.stop),
                    stop_token_ids=tuple(body.stop_token_ids or ()), ignore_eos=body.ignore_eos)


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    return () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)


def output_format(response_format: ResponseFormat | None) -> OutputFormat | None:
    """``{"type": "text"}`` (or no field) leaves the output free; ``json_schema`` is enforced whatever
    ``strict`` says."""
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return OutputFormat("json_object")
    spec = response_format.json_schema
    if spec is None:
        raise RequestError('response_format {"type": "json_schema"} has no "json_schema" object',
                           'send {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}',
                           param="response_format.json_schema")
    if spec.schema_ is None:  # a name without a schema: any JSON object
        return OutputFormat("json_object", param="response_format.json_schema")
    return OutputFormat("json_schema", spec.schema_, param="response_format.json_schema.schema")


def tool_choice(choice: WireToolChoice | None) -> ToolChoice | None:
    return NamedTool(choice.function.name) if isinstance(choice, NamedToolChoice) else choice


def _message(message: ChatMessage) -> Message:
    content = message.content
    if isinstance(content, list):  # media parts were refused first
        content = "".join(part.text or "" for part in content if part.type == "text")
    extra = dict(message.model_extra or {})
    reasoning = extra.pop("reasoning_content", None)
    name = extra.pop("name", None)
    return Message(role=message.role, content=content or "",
                   tool_calls=tuple(ToolCall(c.function.name, c.function.arguments, c.id)
                                    for c in message.tool_calls or ()),
                   tool_call_id=message.tool_call_id, name=name if isinstance(name, str) else None,
                   reasoning=reasoning if isinstance(reasoning, str) else None, extra=extra)


def _refuse_media_parts(body: ChatCompletionRequest) -> None:
    """This server generates from text only: say so for the first image, audio or file part."""
    for i, message in enumerate(body.messages):
        parts = message.content if isinstance(message.content, list) else []
        for j, kind in ((j, part.type) for j, part in enumerate(parts) if part.type != "text"):
            raise RequestError(f"{_MEDIA_REFUSALS[kind]} not supported by this model (messages[{i}].content[{j}] "
                               f"has type {kind!r})", 'send text only: a string, or parts {"type": "text", ...}',
                               param=f"messages.{i}.content.{j}")
