"""Turn a validated request body into what the engine takes: prompt token ids and SamplingParams.

Context checks happen here, before the request is queued, so the client hears both numbers:
"prompt is 5120 tokens, longer than the context of 4096 tokens". A text whose bytes alone prove it
cannot fit is refused before it is tokenized (see ``check_text_fits``). ``chat_prompt_ids`` and
``completion_prompt_ids`` do the expensive work: the routes run them on the prompt worker, off the loop.

Special tokens: in a chat, only the template's markup becomes control tokens; text from the messages is
tokenized as plain text (chat_tokens.py). A raw /v1/completions prompt has no template: the client owns
the whole prompt and writes its own markup (``<|im_start|>``, ``<|eot_id|>``) there, so special-token
text is parsed, as in OpenAI's and llama.cpp's completion endpoints.
"""

from __future__ import annotations

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.grammar import Grammar
from edgeopt.engine.validation import parse_logit_bias
from edgeopt.errors import ContextOverflowError, ModelNameError, RequestError
from edgeopt.server.chat_tokens import PromptPiece, chat_prompt_pieces
from edgeopt.server.reply_parser import ReasoningStart
from edgeopt.server.schemas import ChatCompletionRequest, GenerationFields, Prompt
from edgeopt.server.state import ServedModel, ServerState
from edgeopt.server.tool_request import ToolPlan

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI default for /v1/completions
EXACT_COUNT_SLACK = 2  # see check_text_fits


def check_model_name(state: ServerState, name: str) -> None:
    if name not in state.settings.model_names:
        raise ModelNameError(f"model {name!r} is not served here", f"use model={state.model_id!r} "
                             "(GET /v1/models lists it)", param="model")


_MEDIA_REFUSALS = {"image_url": "images are", "input_audio": "audio is", "file": "files are"}


def refuse_media_parts(body: ChatCompletionRequest) -> None:
    """This server generates from text only: say so for the first image, audio or file part."""
    for i, message in enumerate(body.messages):
        for j, kind in message.media_parts():
            raise RequestError(f"{_MEDIA_REFUSALS[kind]} not supported by this model (messages[{i}].content[{j}] "
                               f"has type {kind!r})", 'send text only: a string, or parts {"type": "text", ...}',
                               param=f"messages.{i}.content.{j}")


def check_chat_request(served: ServedModel, body: ChatCompletionRequest) -> None:
    """Cheap refusals, before a prompt worker is taken (the message count is capped by the schema)."""
    if served.chat_template is None:
        raise RequestError("this model's bundle has no chat template, so /v1/chat/completions cannot format "
                           "messages", "send a plain prompt to /v1/completions instead", param="messages")


def chat_prompt_ids(served: ServedModel, body: ChatCompletionRequest, parse_special_in_content: bool,
                    tools: ToolPlan | None = None) -> list[int]:
    """The chat's prompt ids; the route ran ``check_chat_request`` first (before taking a prompt worker).
    ``tools``: the request's tool plan (edgeopt.server.tool_request), rendered by the template."""
    if served.chat_template is None:  # a caller that skipped check_chat_request: a bug, not a client error
        raise AssertionError("chat_prompt_ids needs a chat template: call check_chat_request first")
    messages = [m.as_template_dict() for m in body.messages]
    variables = template_variables(body)
    if tools is not None:
        messages = tools.template_messages(messages)
        variables.update(tools.template_variables())
    pieces = chat_prompt_pieces(served.chat_template, messages, body.add_generation_prompt, served.control_text,
                                parse_special_in_content, variables)
    check_text_fits(pieces, served, param="messages")
    # The template already wrote BOS (if the model wants one); adding special tokens would double it.
    return [i for piece in pieces
            for i in served.tokenizer.encode(piece.text, add_special=False, parse_special=piece.parse_special)]


def template_variables(body: ChatCompletionRequest) -> dict[str, object]:
    """``reasoning_effort`` for templates that read it (gpt-oss); ``"none"`` also turns Qwen3's thinking off
    and any other effort on (its ``enable_thinking``). Templates that read neither ignore both."""
    if body.reasoning_effort is None:
        return {}
    return {"reasoning_effort": body.reasoning_effort, "enable_thinking": body.reasoning_effort != "none"}


def reasoning_start(served: ServedModel, body: ChatCompletionRequest) -> ReasoningStart | None:
    """Where this request's reply begins for a thinking model (None: the model does not think). A template
    that always thinks (DeepSeek-R1's: no ``enable_thinking``) cannot honour ``reasoning_effort="none"``."""
    reasoning = served.reasoning
    if reasoning is None:
        return None
    if body.reasoning_effort == "none" and not reasoning.syntax.can_switch_off:
        raise RequestError("reasoning_effort='none' asks for no thinking, but this model's chat template always "
                           "thinks (it has no enable_thinking switch)", "leave reasoning_effort unset: the thinking "
                           "comes back apart from the answer, in reasoning_content", param="reasoning_effort")
    return ReasoningStart(reasoning.syntax, reasoning.reply_starts_in_reasoning(template_variables(body)))


def completion_prompt_ids(served: ServedModel, prompt: Prompt) -> list[int]:
    """One prompt's ids (a batch's prompts each in turn: CompletionRequest.prompts)."""
    if isinstance(prompt, list):
        return list(prompt)  # ids outside the vocabulary are refused by the engine (validate_request)
    check_text_fits([PromptPiece(prompt, True)], served, param="prompt")
    return served.tokenizer.encode(prompt, add_special=True)


def check_text_fits(pieces: list[PromptPiece], served: ServedModel, param: str) -> None:
    """Refuse, before tokenizing, a text that must exceed the context: B bytes are at least
    ceil(B / N) tokens when no token stands for more than N bytes (the tokenizer's max_token_bytes).

    Only past EXACT_COUNT_SLACK x the context: a prompt a little too long is tokenized, so the client
    hears its exact length (how much to cut); tokenizing up to twice the context costs little."""
    per_token = served.tokenizer.max_token_bytes()
    if per_token is None:
        return  # this vocabulary gives no bound: only the exact count after tokenizing decides
    size = sum(len(piece.text.encode("utf-8", "surrogatepass")) for piece in pieces)
    at_least = -(-size // per_token)
    if at_least >= EXACT_COUNT_SLACK * served.context_length:
        raise ContextOverflowError(f"prompt is {size} bytes, so at least {at_least} tokens (no token of this "
                                   f"model covers more than {per_token} bytes), longer than the context of "
                                   f"{served.context_length} tokens", "shorten the prompt or restart the server "
                                   "with a larger --context", param=param)


def output_budget(requested: int | None, prompt_len: int, context: int, default: int | None,
                  prompt_param: str, output_param: str = "max_tokens") -> int:
    """max_tokens to use: the request's, or a default that fits what the context leaves after the prompt.
    ``prompt_param`` / ``output_param``: the request's names of the prompt and of its output limit."""
    if prompt_len >= context:
        raise ContextOverflowError(f"prompt is {prompt_len} tokens, longer than the context of {context} tokens "
                                   "(it must leave room for at least one generated token)",
                                   "shorten the prompt or restart the server with a larger --context",
                                   param=prompt_param)
    room = context - prompt_len
    if requested is None:
        return room if default is None else min(default, room)
    if requested > room:
        raise ContextOverflowError(f"prompt ({prompt_len} tokens) + {output_param} ({requested}) = "
                                   f"{prompt_len + requested} tokens exceeds the context of {context} tokens",
                                   f"ask for at most {output_param}={room}, or shorten the prompt",
                                   param=output_param)
    return requested


def sampling_params(body: GenerationFields, max_tokens: int, vocab_size: int, grammar: Grammar | None = None,
                    logprobs: int | None = None, prompt_logprobs: int | None = None) -> SamplingParams:
    """The engine's parameters, parsed but not range-checked: ``Engine.add_request`` validates them once
    (edgeopt.engine.validation), before anything is queued, with the same messages for every caller.
    ``grammar``: the compiled response_format (or tool-call) constraint; ``logprobs`` / ``prompt_logprobs``:
    how many alternatives per generated / prompt token (None: none asked)."""
    params = SamplingParams(
        max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
        min_p=body.min_p, seed=body.seed, repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
        logit_bias=parse_logit_bias(body.logit_bias or {}, vocab_size), stop=body.stop_list(),
        stop_token_ids=list(body.stop_token_ids or []), ignore_eos=body.ignore_eos, grammar=grammar,
        logprobs=logprobs, prompt_logprobs=prompt_logprobs,
    )
    return params
