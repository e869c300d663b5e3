"""Ollama requests -> the neutral chat request (edgeopt.server.chat.request) or, for ``/api/generate`` with
``raw``, a raw request (the prompt as given, like /v1/completions).

What differs from other faces' shapes: tool-call arguments are objects (not JSON text) and calls carry no
id, so ids are made up here and a tool message's ``tool_name`` is matched to the earliest unanswered call
of that name; ``format`` is ``"json"`` or a JSON schema; ``think`` switches thinking on or off; a
generate prompt is the user turn of a one-turn chat (with ``system`` before it).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.engine.validation import chat_logprob_count
from edgeopt.errors import RequestError
from edgeopt.server.chat.request import (
    ChatRequest,
    FieldNames,
    Function,
    Message,
    OutputFormat,
    RawRequest,
    ReasoningEffort,
    ToolCall,
)
from edgeopt.server.models.keep_alive import request_keep_alive
from edgeopt.server.ollama.options import GenerationOptions, generation_options
from edgeopt.server.ollama.schema import (
    Format,
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaMessage,
    Think,
)
from edgeopt.server.state import ServedModel, ServerState

CHAT_NAMES = FieldNames(prompt="messages", output_limit="options.num_predict", reasoning="think")
GENERATE_NAMES = FieldNames(prompt="prompt", output_limit="options.num_predict", reasoning="think")


@dataclass(frozen=True)
class Translation:
    served: ServedModel  # the model the request names
    request: ChatRequest | RawRequest
    num_ctx: int  # the context this request may use (options.num_ctx, at most the served context)


async def chat_request(body: OllamaChatRequest, state: ServerState) -> Translation:
    model = state.model_name(body.model)
    served = await state.model(model, "generation", request_keep_alive(body.keep_alive))
    _refuse_images(body.messages)
    if not body.messages:  # Ollama's "load the model" call; the route answers it without generating
        raise AssertionError("the route answers an empty chat before translating it")
    options = generation_options(body.options, served.context_length)
    request = ChatRequest(
        model=model, messages=_messages(body.messages), sampling=options.sampling, max_tokens=options.max_tokens,
        tools=tuple(Function(t.function.name, t.function.description, t.function.parameters, t.function.strict)
                    for t in body.tools or ()),
        output_format=_output_format(body.format), reasoning_effort=_reasoning_effort(body.think, served),
        top_logprobs=chat_logprob_count(bool(body.logprobs), body.top_logprobs if body.logprobs else None),
        names=CHAT_NAMES)
    return Translation(served, request, options.num_ctx)


async def generate_request(body: OllamaGenerateRequest, state: ServerState) -> Translation:
    """A templated generate is a one-turn chat; ``raw`` sends the prompt as it is, like /v1/completions."""
    model = state.model_name(body.model)
    served = await state.model(model, "generation", request_keep_alive(body.keep_alive))
    if body.images:
        raise RequestError("images are not supported by this model (images has "
                           f"{len(body.images)} item(s))", "send text only", param="images")
    if body.template is not None:
        raise RequestError("a per-request template (Go template syntax) cannot be used: this server renders the "
                           "model's own Jinja chat template", "drop template, or send raw=true with the prompt "
                           "already formatted", param="template")
    if body.suffix:
        raise RequestError("suffix (fill-in-the-middle) is not supported by this server",
                           "drop suffix, or send raw=true with the model's own FIM markup", param="suffix")
    options = generation_options(body.options, served.context_length)
    if body.raw:
        return Translation(served, _raw_request(body, model, options), options.num_ctx)
    messages = ((Message("system", body.system),) if body.system else ()) + (Message("user", body.prompt or ""),)
    request = ChatRequest(
        model=model, messages=messages, sampling=options.sampling, max_tokens=options.max_tokens,
        output_format=_output_format(body.format), reasoning_effort=_reasoning_effort(body.think, served),
        top_logprobs=chat_logprob_count(bool(body.logprobs), body.top_logprobs if body.logprobs else None),
        names=GENERATE_NAMES)
    return Translation(served, request, options.num_ctx)


def _raw_request(body: OllamaGenerateRequest, model: str, options: GenerationOptions) -> RawRequest:
    if body.system or body.think is not None:
        raise RequestError("raw=true sends the prompt exactly as given, so system and think cannot apply",
                           "drop system/think, or drop raw", param="system" if body.system else "think")
    if body.context:
        raise RequestError("raw=true cannot take context ids", "send the previous text in the prompt", param="context")
    if body.logprobs:
        raise RequestError("logprobs with raw=true is not supported here", "drop raw (the prompt is then the user "
                           "turn of the model's template), or use /v1/completions with echo and logprobs",
                           param="logprobs")
    return RawRequest(model, body.prompt or "", options.sampling, max_tokens=options.max_tokens,
                      output_format=_output_format(body.format), names=GENERATE_NAMES)


def _refuse_images(messages: list[OllamaMessage]) -> None:
    for i, message in enumerate(messages):
        if message.images:
            raise RequestError(f"images are not supported by this model (messages[{i}] has {len(message.images)})",
                               "send text only", param=f"messages.{i}.images")


def _messages(messages: list[OllamaMessage]) -> tuple[Message, ...]:
    """Ollama turns -> neutral turns: calls get ids (call_0, call_1, ...), and each tool result answers the
    earliest still unanswered call of its ``tool_name`` (or, without one, the earliest unanswered call)."""
    out: list[Message] = []
    unanswered: list[tuple[str, str]] = []  # (id, function name)
    made = 0
    for message in messages:
        calls = []
        for call in message.tool_calls or ():
            calls.append(ToolCall(call.function.name, call.function.arguments, f"call_{made}"))
            made += 1
        unanswered += [(c.id or "", c.name) for c in calls]
        answers = None
        if message.role == "tool":
            match = next((c for c in unanswered if message.tool_name in (None, c[1])), None)
            if match is not None:
                unanswered.remove(match)
                answers = match[0]
        # a tool turn's tool_name: templates that print the tool's name read it
        out.append(Message(message.role, message.content or "", tuple(calls), tool_call_id=answers,
                           name=message.tool_name if message.role == "tool" else None))
    return tuple(out)


def _reasoning_effort(think: Think, served: ServedModel) -> ReasoningEffort | None:
    """``think``: None leaves the model's default; false turns thinking off; true (or a level) asks for it,
    which only a model that thinks can give. True is effort "medium": it switches thinking on in templates
    that read ``enable_thinking`` (ChatRequest.template_variables) and is gpt-oss's default."""
    if think is None:
        return None
    if think is False:
        return "none" if served.reasoning is not None else None
    if served.reasoning is None:
        raise RequestError(f"think={think!r} asks for thinking, but this model does not think (its chat template "
                           "has no thinking block)", "drop think, or send think=false", param="think")
    return think if isinstance(think, str) else "medium"


def _output_format(value: Format) -> OutputFormat | None:
    if value in (None, ""):
        return None
    if value == "json":
        return OutputFormat("json_object", param="format")
    return OutputFormat("json_schema", value, param="format")
