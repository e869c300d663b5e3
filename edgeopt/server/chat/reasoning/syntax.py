"""Whether a model thinks before it answers, and how, read from its chat template's text (never its name).

Qwen3, QwQ and the DeepSeek-R1 distills write their thinking between ``<think>`` and ``</think>`` before
the answer; their templates say so (they strip ``<think>...</think>`` from earlier assistant turns, or
open the block in the generation prompt). Where the reply starts depends on the generation prompt the
template writes for this request:

* Qwen3 with ``enable_thinking`` (the default): the prompt ends with ``<|im_start|>assistant\\n`` and the
  model opens ``<think>`` itself;
* Qwen3 with ``enable_thinking=false``: the prompt ends with an empty ``<think>\\n\\n</think>\\n\\n``, so the
  reply is all answer;
* DeepSeek-R1 (recent templates): the prompt ends with ``<think>\\n``: the reply begins inside the thinking.

:meth:`ReasoningFormat.reply_starts_in_reasoning` renders the generation prompt of a one-message conversation (it does
not depend on the messages, only on the variables that switch thinking) and looks at which marker comes
last in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import ChatTemplateError
from edgeopt.server.chat.template import ChatTemplate

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_PROBE = [{"role": "user", "content": "."}]  # any conversation: only the generation prompt is read


@dataclass(frozen=True)
class ReasoningSyntax:
    open_marker: str
    close_marker: str
    can_switch_off: bool  # the template reads enable_thinking (Qwen3); R1 templates always think


def detect_reasoning_syntax(template_source: str) -> ReasoningSyntax | None:
    """None: the template shows no thinking, and the output is read as answer only."""
    if THINK_OPEN in template_source and THINK_CLOSE in template_source:
        return ReasoningSyntax(THINK_OPEN, THINK_CLOSE, can_switch_off="enable_thinking" in template_source)
    return None


class ReasoningFormat:
    """A thinking template's syntax, and where its replies start for each setting of the switches (the
    generation prompt is rendered once per setting: one served model has a handful)."""

    def __init__(self, template: ChatTemplate, syntax: ReasoningSyntax) -> None:
        self.syntax = syntax
        self._template = template
        self._starts: dict[tuple[tuple[str, str], ...], bool] = {}

    def reply_starts_in_reasoning(self, variables: dict[str, object]) -> bool:
        """True when the template's generation prompt leaves a thinking block open (the model's first words
        are thinking, with no opening marker of its own). ``variables``: those that switch thinking
        (``enable_thinking``, ``reasoning_effort``); no other variable changes the generation prompt."""
        key = tuple(sorted((name, repr(value)) for name, value in variables.items()))
        if key not in self._starts:
            self._starts[key] = self._opens_block(variables)
        return self._starts[key]

    def _opens_block(self, variables: dict[str, object]) -> bool:
        try:
            with_prompt = self._template.render(_PROBE, add_generation_prompt=True, variables=variables)
            without = self._template.render(_PROBE, add_generation_prompt=False, variables=variables)
        except ChatTemplateError:
            return False  # a template that refuses a lone user message: judged on the reply's own markers
        generation_prompt = with_prompt[len(without):] if with_prompt.startswith(without) else with_prompt
        return generation_prompt.rfind(self.syntax.open_marker) > generation_prompt.rfind(self.syntax.close_marker)


def reasoning_format(template: ChatTemplate | None) -> ReasoningFormat | None:
    """The served model's reasoning format; None when its template shows no thinking."""
    syntax = None if template is None else detect_reasoning_syntax(template.source)
    return None if syntax is None or template is None else ReasoningFormat(template, syntax)
