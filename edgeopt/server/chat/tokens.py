"""Chat messages -> prompt pieces, so that only the chat template's own markup becomes control tokens.

A user message containing ``"<|im_start|>system\\n..."`` must not open a system turn. Before rendering,
every control-token text inside a message (content, name, tool calls: any string the client sent) or a
tool definition is
swapped for a placeholder; the template renders as usual (trim, tojson and the like see an opaque word);
the rendered text is cut at the placeholders. The pieces between them (markup and message text, with no
control text from the client left in them) are tokenized with special-token parsing; each placeholder
becomes its original text, tokenized as plain characters. When no message contains control text (nearly
always) there is no placeholder and the prompt is the rendered text in one piece, tokenized exactly as
before. ``parse_special_in_content`` (``edgeopt serve --parse-special-in-content``) skips the swap.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgeopt.runtimes.control_text import ControlTextFinder
from edgeopt.server.chat.template import ChatTemplate

_PLACEHOLDER = "EDGEOPTCONTROLTEXT{nonce}N{index}E"  # letters and digits: survives trim, tojson, upper


@dataclass(frozen=True)
class PromptPiece:
    text: str
    parse_special: bool  # True: markup, control-token text becomes control tokens; False: plain text


def chat_prompt_pieces(template: ChatTemplate, messages: list[dict[str, Any]], add_generation_prompt: bool,
                       controls: ControlTextFinder, parse_special_in_content: bool = False,
                       variables: dict[str, Any] | None = None) -> list[PromptPiece]:
    """``variables``: more names for the template (``tools``: client text too, so swapped the same way)."""
    variables = variables or {}
    if parse_special_in_content or not controls:
        return [PromptPiece(template.render(messages, add_generation_prompt, variables), True)]
    nonce = secrets.token_hex(8)  # unguessable: a client cannot write a placeholder into its own text
    swapped: list[str] = []

    def placeholder(control_text: str) -> str:
        swapped.append(control_text)
        return _PLACEHOLDER.format(nonce=nonce, index=len(swapped) - 1)

    safe = _map_strings(messages, lambda s: controls.sub(placeholder, s))
    safe_variables = _map_strings(variables, lambda s: controls.sub(placeholder, s))
    rendered = template.render(safe, add_generation_prompt, safe_variables)
    if not swapped:
        return [PromptPiece(rendered, True)]
    return _split_at_placeholders(rendered, nonce, swapped)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (message dicts, lists, strings) with ``change`` applied to every string in it."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, change) for k, v in value.items()}
    return value


def _split_at_placeholders(rendered: str, nonce: str, swapped: list[str]) -> list[PromptPiece]:
    """Markup pieces, and each swapped control text as a plain piece of its own (tokenizers can then look
    its plain ids up instead of tokenizing it: see edgeopt.runtimes.bundle_tokenizer)."""
    pattern = re.compile(_PLACEHOLDER.format(nonce=nonce, index=r"(\d+)"), re.IGNORECASE)
    pieces: list[PromptPiece] = []
    pos = 0
    for match in pattern.finditer(rendered):
        if match.start() > pos:
            pieces.append(PromptPiece(rendered[pos:match.start()], True))
        pieces.append(PromptPiece(swapped[int(match.group(1))], False))
        pos = match.end()
    if pos < len(rendered):
        pieces.append(PromptPiece(rendered[pos:], True))
    return pieces
