"""Multi-turn chat hits the prefix cache only if turn N's rendered prompt starts with turn N-1's prompt
followed by the answer the model produced. Checked on the template we ship (the demo's ChatML) and on
llama.cpp's copies of real templates (ChatML, Llama 3.x, Gemma, Phi-3.5, Mistral, SmolLM3)."""

from __future__ import annotations

import pytest

from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.server.chat.template import ChatTemplate
from tests.exporters.reference_converter import reference_root

# (template, the text that ends an assistant turn as the model generates it: its end-of-turn token)
REAL_TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": "<|im_end|>",
    "meta-llama-Llama-3.1-8B-Instruct": "<|eot_id|>",
    "meta-llama-Llama-3.2-3B-Instruct": "<|eot_id|>",
    "google-gemma-2-2b-it": "<end_of_turn>",
    "microsoft-Phi-3.5-mini-instruct": "<|end|>",
    "mistralai-Mistral-Nemo-Instruct-2407": "</s>",
    "HuggingFaceTB-SmolLM3-3B": "<|im_end|>",
}
ANSWERS = ["Sure. Here is the function:\n\ndef f(x):\n    return x * 2", "It returns twice its input."]
QUESTIONS = ["Write f doubling x.", "What does f return?", "Thanks. Now make it triple."]


def reference_chat_template(name: str) -> str:
    path = reference_root() / "models" / "templates" / f"{name}.jinja"
    if not path.is_file():
        pytest.fail(f"{path} is missing; run scripts/fetch_reference_converter.py", pytrace=False)
    return path.read_text()


def check_turns_extend(template: ChatTemplate, end_of_turn: str, system: bool = True) -> None:
    messages = [{"role": "system", "content": "You are a careful Python assistant."}] if system else []
    for turn, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        prompt = template.render(messages)
        if turn > 0:
            assert prompt.startswith(previous), (
                f"turn {turn + 1} does not extend turn {turn}'s prompt and answer:\n{previous!r}\n{prompt!r}")
        if turn < len(ANSWERS):
            messages.append({"role": "assistant", "content": ANSWERS[turn]})
            previous = prompt + ANSWERS[turn] + end_of_turn  # what the KV held after that turn


def test_the_shipped_chatml_template_extends_each_turn() -> None:
    check_turns_extend(ChatTemplate(CHATML_TEMPLATE), "<|im_end|>")


# Templates that move the system message into the *last* user turn: a chat with a system prompt then
# re-renders from the first turn on, so only the system-less chat can reuse its previous turns.
SYSTEM_IN_LAST_TURN = {"mistralai-Mistral-Nemo-Instruct-2407"}


@pytest.mark.parametrize("name", sorted(REAL_TEMPLATES))
def test_real_templates_extend_each_turn(name: str) -> None:
    template = ChatTemplate(reference_chat_template(name), bos_token="<s>", eos_token=REAL_TEMPLATES[name])
    # Gemma 2 refuses a system role: its first user turn carries the instructions.
    with_system = not name.startswith("google-gemma") and name not in SYSTEM_IN_LAST_TURN
    check_turns_extend(template, REAL_TEMPLATES[name], system=with_system)


@pytest.mark.parametrize("name", sorted(SYSTEM_IN_LAST_TURN))
def test_templates_that_move_the_system_message_break_the_prefix(name: str) -> None:
    """A known limit, kept visible: should the template change, this says the cache now works there."""
    template = ChatTemplate(reference_chat_template(name), bos_token="<s>", eos_token=REAL_TEMPLATES[name])
    with pytest.raises(AssertionError, match="turn 2 does not extend"):
        check_turns_extend(template, REAL_TEMPLATES[name], system=True)
