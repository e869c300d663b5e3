"""A validated chat request -> what the engine and the reply need: prompt ids, SamplingParams, tool plan,
and where a thinking model's reply starts.

Every API face that chats (/v1/chat/completions, /v1/responses, /v1/messages, Ollama's /api/chat)
translates its body into a :class:`ChatCompletionRequest` and calls :func:`prepare_chat`, so template
rendering, tool calling, constrained decoding and the prefix cache follow one path whatever the wire
format; each face only shapes the output differently, reading it with :meth:`PreparedChat.reply_parser`.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.validation import chat_logprob_count
from edgeopt.server.chat_output import ChatOutput
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.openai_format import ResponseShape
from edgeopt.server.reply_parser import ReasoningStart, ReplyParser
from edgeopt.server.request_prep import (chat_prompt_ids, check_chat_request, check_model_name, output_budget,
                                         reasoning_start, refuse_media_parts, sampling_params)
from edgeopt.server.response_format import compile_grammar, response_grammar_spec
from edgeopt.server.schemas import ChatCompletionRequest
from edgeopt.server.state import ServedModel, ServerState
from edgeopt.server.tool_grammar import tool_call_grammar
from edgeopt.server.tool_request import ToolPlan, plan_tools


@dataclass(frozen=True)
class PreparedChat:
    prompt_ids: list[int]
    params: SamplingParams
    tools: ToolPlan | None  # None: no tools, or tool_choice="none" (the output is not read for calls)
    top_logprobs: int | None  # None: no logprobs asked
    reasoning: ReasoningStart | None = None  # None: the model does not think (its output is all answer)

    def reply_parser(self) -> ReplyParser:
        """A fresh reader of this reply's thinking, answer and tool calls (it keeps state: one per reply)."""
        return ReplyParser(None if self.tools is None else self.tools.parser(), self.reasoning)

    def choice_format(self, state: ServerState, shape: ResponseShape) -> ChoiceFormat:
        reads = self.tools is not None or self.reasoning is not None
        return ChoiceFormat(shape, state.ready_model(), self.prompt_ids, echo=False,
                            logprobs=self.top_logprobs is not None,
                            output=ChatOutput(self.reply_parser()) if reads else None)


async def prepare_chat(state: ServerState, body: ChatCompletionRequest, prompt_param: str = "messages",
                       output_param: str = "max_tokens") -> PreparedChat:
    """Check, render and tokenize ``body`` (on the prompt worker, off the event loop) and compile its
    constraint. ``prompt_param`` / ``output_param``: the face's names of the fields a too-long prompt or
    output limit is blamed on."""
    served, tools, reasoning = _checked(state, body)
    top_logprobs = chat_logprob_count(body.logprobs, body.top_logprobs)
    grammar_spec = response_grammar_spec(body.response_format)
    if tools is not None and tools.enforced:
        grammar_spec = tool_call_grammar(tools, served.tokenizer.control_token_ids())
    parse_special = state.settings.parse_special_in_content
    prompt_ids, grammar = await state.prompt_worker.run(
        lambda: (chat_prompt_ids(served, body, parse_special, tools), compile_grammar(served, grammar_spec)))
    # Chat has no small default: the reply may use whatever the context leaves after the prompt.
    max_tokens = output_budget(body.output_limit(), len(prompt_ids), served.context_length, None,
                               prompt_param=prompt_param, output_param=output_param)
    params = sampling_params(body, max_tokens, served.runtime.info.vocab_size, grammar=grammar,
                             logprobs=top_logprobs)
    if grammar is not None and reasoning is not None and reasoning.inside:
        # The constraint (a JSON answer, a forced call) is what the model writes, from its first token: that
        # is the answer, even where the template's prompt opened a thinking block.
        reasoning = ReasoningStart(reasoning.syntax, inside=False)
    return PreparedChat(prompt_ids, params, tools, top_logprobs, reasoning)


async def count_chat_tokens(state: ServerState, body: ChatCompletionRequest) -> int:
    """The length of ``body``'s prompt, rendered and tokenized exactly as :func:`prepare_chat` does (the same
    checks and refusals), without compiling a constraint or sizing the output."""
    served, tools, _ = _checked(state, body)
    parse_special = state.settings.parse_special_in_content
    return len(await state.prompt_worker.run(lambda: chat_prompt_ids(served, body, parse_special, tools)))


def _checked(state: ServerState, body: ChatCompletionRequest) -> tuple[ServedModel, ToolPlan | None,
                                                                        ReasoningStart | None]:
    """The cheap refusals, before a prompt worker is taken; the served model, tool plan and reasoning start."""
    served = state.ready_model()
    check_model_name(state, body.model)
    refuse_media_parts(body)
    check_chat_request(served, body)
    return served, plan_tools(body, served.chat_template), reasoning_start(served, body)
