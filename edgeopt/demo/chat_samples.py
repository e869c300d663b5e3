"""Chat-formatted (ChatML) training samples, so the demo model answers a chat request with text.

The questions ask what a stdlib function or class does; the answers are the first sentence of its
own docstring, which the model also sees inside the pydoc corpus, so it learns to recall rather than
to invent. A few fixed exchanges teach it to introduce itself. Everything is derived from the
modules' docstrings in a fixed order, so the samples are as deterministic as the corpus.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

from edgeopt.demo.corpus import run_isolated

IDENTITY = (
    "I am the edgeopt demo model, a small Llama trained on the Python standard library "
    "documentation. Ask me what a module, function or class does."
)
GREETINGS = (
    ("Hello!", "Hello! " + IDENTITY),
    ("Hi", "Hi! " + IDENTITY),
    ("Who are you?", IDENTITY),
    ("What can you do?", "I can tell you what a function or class of the Python standard library does, "
                         "for example json.dumps or pathlib.Path."),
    ("Say hello in one short sentence.", "Hello from the edgeopt demo model!"),
)
QUESTION_TEMPLATES = (
    "What does {name} do?",
    "Explain {name} in one sentence.",
    "What is {name} used for?",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def first_sentence(doc: str, max_chars: int = 240) -> str | None:
    """The docstring's first sentence on one line, or None when it is missing or too long."""
    paragraph = doc.strip().split("\n\n", 1)[0]
    line = " ".join(paragraph.split())
    if not line or ">>>" in line:
        return None
    sentence = _SENTENCE_END.split(line, 1)[0]
    if len(sentence) > max_chars or len(sentence) < 12:
        return None
    return sentence if sentence.endswith((".", "!", "?")) else sentence + "."


def documented_members(module_name: str) -> list[tuple[str, str]]:
    """(qualified name, first docstring sentence) for a module's public functions and classes."""
    module = __import__(module_name)
    found: list[tuple[str, str]] = []
    for attr in sorted(getattr(module, "__all__", None) or dir(module)):
        if attr.startswith("_"):
            continue
        obj = getattr(module, attr, None)
        if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
            continue
        summary = first_sentence(inspect.getdoc(obj) or "")
        if summary:
            found.append((f"{module_name}.{attr}", summary))
    return found


def render_chatml(messages: list[tuple[str, str]]) -> str:
    """The same text the tokenizer's chat template produces, written out for training."""
    return "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)


def chat_samples(module_names: list[str], max_per_module: int = 40, greeting_repeats: int = 20) -> list[str]:
    """ChatML conversations about ``module_names``' members plus repeated self-introductions."""
    samples: list[str] = []
    for name in module_names:
        try:
            members = documented_members(name)
        except Exception:  # a module missing from a trimmed Python build is skipped, as in the corpus
            continue
        for index, (qualified, summary) in enumerate(members[:max_per_module]):
            question = QUESTION_TEMPLATES[index % len(QUESTION_TEMPLATES)].format(name=qualified)
            samples.append(render_chatml([("user", question), ("assistant", f"{qualified}: {summary}")]))
    for repeat in range(greeting_repeats):
        for question, answer in GREETINGS:
            samples.append(render_chatml([("user", question), ("assistant", answer)]))
    return samples


_ISOLATED_SCRIPT = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from edgeopt.demo.chat_samples import chat_samples; "
    "sys.stdout.write(json.dumps(chat_samples(sys.argv[2:])))"
)


def isolated_chat_samples(module_names: list[str]) -> list[str]:
    """chat_samples() computed in a fresh interpreter.

    Module attributes are process state: pytest, for one, replaces ``threading.excepthook``, which
    shifts which members a module contributes. A fresh interpreter makes the samples (and so the
    demo model's cache key) the same wherever the build is started from.
    """
    package_root = Path(__file__).resolve().parents[2]
    return json.loads(run_isolated(_ISOLATED_SCRIPT, str(package_root), *module_names))
