"""A request in the neutral model -> what the engine and the reply need: prompt ids, SamplingParams, the tool
plan, and where a thinking model's reply starts.

Every API face that chats (OpenAI chat, Responses, Anthropic Messages, Ollama) translates its body into a
:class:`~edgeopt.server.chat.request.ChatRequest` and calls :func:`prepare_chat`, so template rendering, tool
calling, constrained decoding and the prefix cache follow one path whatever the wire format; each face only
shapes the output differently, reading it with a :class:`~edgeopt.server.chat.reply.ReplyParser`. The path,
each step in its own file: decide (chat/decisions.py), render and compile on the prompt worker
(chat/render.py), size and parametrize (chat/sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.engine.api import SamplingParams
from edgeopt.server.chat.decisions import decide
from edgeopt.server.chat.output_format import output_grammar_spec
from edgeopt.server.chat.render import chat_prompt_ids, render_chat, render_raw
from edgeopt.server.chat.reply import ReasoningStart
from edgeopt.server.chat.request import ChatRequest, RawRequest
from edgeopt.server.chat.sampling import engine_params
from edgeopt.server.chat.tools.plan import ToolPlan
from edgeopt.server.batching.prompt_worker import INLINE_PROMPT_CHARS, PromptWorker
from edgeopt.server.state import ServedModel


@dataclass(frozen=True)
class Prepared:
    """What every generation needs: the model it runs on, its prompt and its parameters."""

    served: ServedModel
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class PreparedChat(Prepared):
    tools: ToolPlan | None = None  # None: no tools, or tool_choice="none" (the output is not read for calls)
    top_logprobs: int | None = None  # None: no logprobs asked
    reasoning: ReasoningStart | None = None  # None: the model does not think (its output is all answer)

    @property
    def reads_reply(self) -> bool:
        """Whether the output must be read for thinking or calls (else it is all answer text)."""
        return self.tools is not None or self.reasoning is not None


async def prepare_chat(served: ServedModel, worker: PromptWorker, body: ChatRequest,
                       parse_special_in_content: bool = False) -> PreparedChat:
    """Decide, render and tokenize ``body`` (on the prompt ``worker``, off the event loop, unless it is short),
    compile its constraint, and size its output. ``served``: the model the face resolved (ServerState.model)."""
    decisions = decide(served, body)
    inline = decisions.grammar is None and _chat_chars(body) <= INLINE_PROMPT_CHARS
    prompt_ids, grammar = await worker.run(lambda: render_chat(served, body, decisions, parse_special_in_content),
                                           inline)
    # Chat has no small default: the reply may use whatever the context leaves after the prompt.
    params = engine_params(body.sampling, body.max_tokens, len(prompt_ids), served.context_length,
                           served.runtime.info.vocab_size, body.names, grammar=grammar, logprobs=body.top_logprobs)
    return PreparedChat(served, prompt_ids, params, decisions.tools, body.top_logprobs, decisions.reasoning)


async def count_chat_tokens(served: ServedModel, worker: PromptWorker, body: ChatRequest,
                            parse_special_in_content: bool = False) -> int:
    """The length of ``body``'s prompt, rendered and tokenized exactly as :func:`prepare_chat` does (the same
    checks and refusals), without compiling a constraint or sizing the output."""
    decisions = decide(served, body)
    return len(await worker.run(lambda: chat_prompt_ids(served, body, decisions, parse_special_in_content)))


async def prepare_raw(served: ServedModel, worker: PromptWorker, body: RawRequest) -> Prepared:
    """A raw prompt (no template) tokenized as given, its constraint compiled, its output sized."""
    spec = output_grammar_spec(body.output_format)
    inline = spec is None and len(body.prompt) <= INLINE_PROMPT_CHARS
    prompt_ids, grammar = await worker.run(lambda: render_raw(served, body, spec), inline)
    params = engine_params(body.sampling, body.max_tokens, len(prompt_ids), served.context_length,
                           served.runtime.info.vocab_size, body.names, body.default_max_tokens, grammar, body.logprobs,
                           body.prompt_logprobs)
    return Prepared(served, prompt_ids, params)


def _chat_chars(body: ChatRequest) -> int:
    """A bound on what rendering ``body`` reads: its texts' length, or more than the inline limit when it
    carries tools or structured turns (the template renders their JSON too)."""
    if body.tools or any(m.tool_calls or m.extra for m in body.messages):
        return INLINE_PROMPT_CHARS + 1
    return sum(len(m.content) + len(m.reasoning or "") for m in body.messages)
