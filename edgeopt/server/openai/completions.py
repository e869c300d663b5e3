"""/v1/completions' prompts -> what the engine and the reply need, one prompt at a time, and a batch of
prompts answered as one response with a choice per prompt.

Evaluation harnesses rely on both legacy-API features served here: a batch of prompts (lm-evaluation-
harness sends lists of token ids, several per request) and ``max_tokens: 0`` with ``echo``, which scores
the prompt alone (each prompt token's logprob) and generates nothing the client sees.
"""

from __future__ import annotations

import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from edgeopt.errors import BackendError, RequestError
from edgeopt.server.chat.prepare import Prepared, prepare_raw
from edgeopt.server.chat.request import FieldNames, RawRequest
from edgeopt.server.generation.respond import admit
from edgeopt.server.generation.stream import collect_all
from edgeopt.server.openai.choice import ChoiceFormat
from edgeopt.server.openai.format import ResponseShape, usage
from edgeopt.server.openai.schema import CompletionRequest, Prompt
from edgeopt.server.openai.translate import output_format, sampling
from edgeopt.server.state import ServedModel, ServerState

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI default for /v1/completions


async def prepare_completion(state: ServerState, served: ServedModel, body: CompletionRequest, prompt: Prompt,
                             shape: ResponseShape) -> tuple[ChoiceFormat, Prepared]:
    if body.max_tokens == 0 and not body.echo:
        raise RequestError("max_tokens=0 generates nothing", "send max_tokens >= 1, or echo=true (with logprobs) to "
                           "score the prompt alone", param="max_tokens")
    prompt_only = body.max_tokens == 0
    # Scoring the prompt still runs one sampling step (its logits come with the prompt's last position);
    # that token is dropped from the reply (ChoiceFormat.prompt_only).
    raw = RawRequest(body.model, prompt, sampling(body), max_tokens=1 if prompt_only else body.max_tokens,
                     default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS, output_format=output_format(body.response_format),
                     logprobs=body.logprobs, prompt_logprobs=body.logprobs if body.echo else None,
                     names=FieldNames(prompt="prompt"))
    prepared = await prepare_raw(served, state.prompt_worker, raw)
    choice = ChoiceFormat(shape, served, prepared.prompt_ids, echo=body.echo,
                          logprobs=body.logprobs is not None, prompt_text=prompt if isinstance(prompt, str) else None,
                          prompt_only=prompt_only)
    return choice, prepared


async def respond_batch(state: ServerState, served: ServedModel, request: Request, body: CompletionRequest,
                        prompts: list[Prompt]) -> Response:
    """Every prompt runs as its own engine request, all queued at once (the engine batches them); the reply
    is OpenAI's: one choice per prompt, in order (``index``), usage summed."""
    if body.stream:
        raise RequestError(f"stream=true with {len(prompts)} prompts is not supported",
                           "send one prompt per streamed request, or stream=false for a batch", param="stream")
    shape = ResponseShape(chat=False, request_id=f"cmpl-{uuid.uuid4().hex}", model=body.model)
    prepared = [await prepare_completion(state, served, body, prompt, shape) for prompt in prompts]
    for i, (choice, _) in enumerate(prepared):
        if not choice.prompt_ids:
            raise RequestError(f"prompt {i} is empty (0 tokens)", "send at least one token of text", param="prompt")
    generations = []
    try:
        for i, (_, one) in enumerate(prepared):
            generations.append(admit(state, request, f"{shape.request_id}-{i}", one))
    except BaseException:  # one prompt refused: the ones already queued must not run on unread
        for generation in generations:
            await generation.aclose()
        raise
    outputs = await collect_all(generations, request, state.metrics)
    if outputs is None:
        return Response(status_code=499)
    choices, prompt_tokens, completion_tokens, cached = [], 0, 0, 0
    for index, ((choice, _), last) in enumerate(zip(prepared, outputs)):
        if last.finish_reason == "error":
            raise BackendError(f"the model runtime failed while generating: {last.error}", "see the server log")
        text, logprobs = choice.content(last, first=True)
        choices.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": last.finish_reason})
        prompt_tokens += len(choice.prompt_ids)
        completion_tokens += choice.completion_tokens(last)
        cached += last.cached_tokens
    reply = shape.full("", None, usage(prompt_tokens, completion_tokens, cached))
    reply["choices"] = choices
    return JSONResponse(reply)
