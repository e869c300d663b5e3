"""/v1/completions' prompts -> what the engine and the reply need, one prompt at a time, and a batch of
prompts answered as one response with a choice per prompt.

Evaluation harnesses rely on both legacy-API features served here: a batch of prompts (lm-evaluation-
harness sends lists of token ids, several per request) and ``max_tokens: 0`` with ``echo``, which scores
the prompt alone (each prompt token's logprob) and generates nothing the client sees.
"""

from __future__ import annotations

import asyncio
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from edgeopt.engine.api import SamplingParams
from edgeopt.errors import BackendError, RequestError
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.openai_format import ResponseShape, usage
from edgeopt.server.request_prep import (COMPLETIONS_DEFAULT_MAX_TOKENS, completion_prompt_ids, output_budget,
                                         sampling_params)
from edgeopt.server.response_format import compile_grammar, response_grammar_spec
from edgeopt.server.schemas import CompletionRequest, Prompt
from edgeopt.server.state import ServerState
from edgeopt.server.streaming import ClientGone, collect, start_generation


async def prepare_completion(state: ServerState, body: CompletionRequest, prompt: Prompt,
                             shape: ResponseShape) -> tuple[ChoiceFormat, SamplingParams]:
    if body.max_tokens == 0 and not body.echo:
        raise RequestError("max_tokens=0 generates nothing", "send max_tokens >= 1, or echo=true (with logprobs) to "
                           "score the prompt alone", param="max_tokens")
    served = state.ready_model()
    spec = response_grammar_spec(body.response_format)
    prompt_ids, grammar = await state.prompt_worker.run(
        lambda: (completion_prompt_ids(served, prompt), compile_grammar(served, spec)))
    prompt_only = body.max_tokens == 0
    # Scoring the prompt still runs one sampling step (its logits come with the prompt's last position);
    # that token is dropped from the reply (ChoiceFormat.prompt_only).
    max_tokens = output_budget(1 if prompt_only else body.max_tokens, len(prompt_ids), served.context_length,
                               COMPLETIONS_DEFAULT_MAX_TOKENS, prompt_param="prompt")
    params = sampling_params(body, max_tokens, served.runtime.info.vocab_size, grammar=grammar,
                             logprobs=body.logprobs, prompt_logprobs=body.logprobs if body.echo else None)
    choice = ChoiceFormat(shape, served, prompt_ids, echo=body.echo, logprobs=body.logprobs is not None,
                          prompt_text=prompt if isinstance(prompt, str) else None, prompt_only=prompt_only)
    return choice, params


async def respond_batch(state: ServerState, request: Request, body: CompletionRequest,
                        prompts: list[Prompt]) -> Response:
    """Every prompt runs as its own engine request, all queued at once (the engine batches them); the reply
    is OpenAI's: one choice per prompt, in order (``index``), usage summed."""
    if body.stream:
        raise RequestError(f"stream=true with {len(prompts)} prompts is not supported",
                           "send one prompt per streamed request, or stream=false for a batch", param="stream")
    shape = ResponseShape(chat=False, request_id=f"cmpl-{uuid.uuid4().hex}", model=body.model)
    prepared = [await prepare_completion(state, body, prompt, shape) for prompt in prompts]
    for i, (choice, _) in enumerate(prepared):
        if not choice.prompt_ids:
            raise RequestError(f"prompt {i} is empty (0 tokens)", "send at least one token of text", param="prompt")
    engine = state.ready_model().engine
    generations = []
    for i, (choice, params) in enumerate(prepared):
        tracker = state.metrics.track()
        generations.append(start_generation(engine, f"{shape.request_id}-{i}", choice.prompt_ids, params, tracker,
                                            request))
        tracker.admitted(len(choice.prompt_ids))
    try:
        outputs = await asyncio.gather(*(collect(generation, request) for generation in generations))
    except ClientGone:
        state.metrics.count_error(499)  # nginx's "client closed request": nobody reads this reply
        return Response(status_code=499)
    finally:
        for generation in generations:
            await generation.aclose()
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
