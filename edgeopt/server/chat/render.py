"""A chat or a raw prompt -> prompt token ids, and the output's grammar compiled for the model's vocabulary: the
expensive work, which the caller runs on the prompt worker, off the event loop.

Special tokens: in a chat, only the template's markup becomes control tokens; text from the messages is
tokenized as plain text (chat/tokens.py). A raw prompt has no template: the client owns the whole prompt
and writes its own markup (``<|im_start|>``, ``<|eot_id|>``) there, so special-token text is parsed, as in
OpenAI's and llama.cpp's completion endpoints. A text whose bytes alone prove it cannot fit the context is
refused before it is tokenized (``check_text_fits``).
"""

from __future__ import annotations

from edgeopt.engine.grammar import Grammar, GrammarSpec
from edgeopt.errors import ContextOverflowError
from edgeopt.server.chat.decisions import ChatDecisions
from edgeopt.server.chat.request import ChatRequest, RawRequest
from edgeopt.server.chat.tokens import PromptPiece, chat_prompt_pieces
from edgeopt.server.chat.tools.prompt import with_tools
from edgeopt.server.state import ServedModel

EXACT_COUNT_SLACK = 2  # see check_text_fits


def render_chat(served: ServedModel, body: ChatRequest, decisions: ChatDecisions,
                parse_special_in_content: bool) -> tuple[list[int], Grammar | None]:
    """The prompt ids and the compiled output grammar: everything the prompt worker does for a chat."""
    return (chat_prompt_ids(served, body, decisions, parse_special_in_content),
            compile_grammar(served, decisions.grammar))


def render_raw(served: ServedModel, body: RawRequest, grammar: GrammarSpec | None) -> tuple[list[int], Grammar | None]:
    """A raw prompt's ids and its compiled output grammar."""
    return raw_prompt_ids(served, body.prompt, body.names.prompt), compile_grammar(served, grammar)


def chat_prompt_ids(served: ServedModel, body: ChatRequest, decisions: ChatDecisions,
                    parse_special_in_content: bool) -> list[int]:
    """The chat's prompt ids, its messages rendered by the model's template with the decided tools."""
    if served.chat_template is None:  # decide() refused this request: a bug, not a client error
        raise AssertionError("chat_prompt_ids needs a chat template: decide() checks for one")
    messages = [m.template_dict() for m in body.messages]
    variables = dict(decisions.variables)
    if decisions.tools is not None:
        messages, shown = with_tools(decisions.tools, messages)
        variables.update(shown)
    pieces = chat_prompt_pieces(served.chat_template, messages, body.add_generation_prompt, served.control_text,
                                parse_special_in_content, variables)
    check_text_fits(pieces, served, param=body.names.prompt)
    # The template already wrote BOS (if the model wants one); adding special tokens would double it.
    return [i for piece in pieces
            for i in served.tokenizer.encode(piece.text, add_special=False, parse_special=piece.parse_special)]


def raw_prompt_ids(served: ServedModel, prompt: str | list[int], param: str = "prompt") -> list[int]:
    """One raw prompt's ids: token ids as given (ids outside the vocabulary are refused by the engine's
    validate_request), text tokenized with its control-token text parsed and BOS added."""
    if isinstance(prompt, list):
        return list(prompt)
    check_text_fits([PromptPiece(prompt, True)], served, param=param)
    return served.tokenizer.encode(prompt, add_special=True)


def compile_grammar(served: ServedModel, spec: GrammarSpec | None) -> Grammar | None:
    """Compile for the served model (1-1000 ms, GIL released). A schema feature the constraint engine cannot
    enforce is a 400 naming it, raised here, before the request is queued."""
    return None if spec is None else served.grammars.compile(spec)


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
