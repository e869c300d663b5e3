"""Turn a validated request body into what the engine takes: prompt token ids and SamplingParams.

Context checks happen here, before the request is queued, so the client hears both numbers:
"prompt is 5120 tokens, longer than the context of 4096 tokens".
"""

from __future__ import annotations

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.validation import parse_logit_bias, validate_sampling
from edgeopt.errors import ContextOverflowError, ModelNameError, RequestError
from edgeopt.server.schemas import ChatCompletionRequest, CompletionRequest, GenerationFields
from edgeopt.server.state import ServedModel, ServerState

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI default for /v1/completions


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


def chat_prompt_ids(served: ServedModel, body: ChatCompletionRequest) -> list[int]:
    if served.chat_template is None:
        raise RequestError("this model's bundle has no chat template, so /v1/chat/completions cannot format "
                           "messages", "send a plain prompt to /v1/completions instead", param="messages")
    text = served.chat_template.render([m.as_template_dict() for m in body.messages], body.add_generation_prompt)
    # The template already wrote BOS (if the model wants one); adding special tokens would double it.
    return served.tokenizer.encode(text, add_special=False)


def completion_prompt_ids(served: ServedModel, body: CompletionRequest, vocab_size: int) -> list[int]:
    prompt = body.prompt
    if isinstance(prompt, str):
        return served.tokenizer.encode(prompt, add_special=True)
    if isinstance(prompt[0], str):
        return served.tokenizer.encode(str(prompt[0]), add_special=True)
    bad = [t for t in prompt if not 0 <= int(t) < vocab_size]
    if bad:
        raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})",
                           "send text, or token ids from this model's tokenizer", param="prompt")
    return [int(t) for t in prompt]


def output_budget(requested: int | None, prompt_len: int, context: int, default: int | None,
                  prompt_param: str) -> int:
    """max_tokens to use: the request's, or a default that fits what the context leaves after the prompt."""
    if prompt_len >= context:
        raise ContextOverflowError(f"prompt is {prompt_len} tokens, longer than the context of {context} tokens "
                                   "(it must leave room for at least one generated token)",
                                   "shorten the prompt or restart the server with a larger --context",
                                   param=prompt_param)
    room = context - prompt_len
    if requested is None:
        return room if default is None else min(default, room)
    if requested > room:
        raise ContextOverflowError(f"prompt ({prompt_len} tokens) + max_tokens ({requested}) = "
                                   f"{prompt_len + requested} tokens exceeds the context of {context} tokens",
                                   f"ask for at most max_tokens={room}, or shorten the prompt", param="max_tokens")
    return requested


def sampling_params(body: GenerationFields, max_tokens: int, vocab_size: int) -> SamplingParams:
    """The engine's parameters; refused here (ranges: edgeopt.engine.validation) before anything is queued."""
    params = SamplingParams(
        max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
        min_p=body.min_p, seed=body.seed, repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
        logit_bias=parse_logit_bias(body.logit_bias or {}, vocab_size), stop=body.stop_list(),
        stop_token_ids=list(body.stop_token_ids or []), ignore_eos=body.ignore_eos,
    )
    validate_sampling(params, vocab_size)
    return params
