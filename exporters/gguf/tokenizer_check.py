"""Export self-check: llama.cpp must read text into the same token ids as the checkpoint's own tokenizer.

A GGUF carries its vocabulary, merges and a pre-tokenizer *name*; llama.cpp re-implements the rest. A
vocabulary it reads differently (a pre-tokenizer matched to the wrong name, a special token it does not
parse) makes a model that loads and answers, worse, and nothing says why. So after writing a GGUF, a
fixed set of strings (spaces, digits, accents and emoji, code, the checkpoint's own special-token
markup) is tokenized by both, and the bundle is refused at the first difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError

CHECK_TEXTS = (
    "Hello world", "The quick brown fox jumps over the lazy dog.", "  two  spaces,\ttabs\tand\nnew\n\nlines\n",
    "1234567890 and 3.14159 and 1,000,000 on 2024-05-06", "I'm sure they'll say it's what we'd've done",
    "naïve café Ünïcödé façade 東京 北京 🙂🚀 ∑√≤", "def f(x):\n    return x ** 2  # square\n",
    "if (a && b) { return a->c[0]; } else { x += 1; }", "someone@example.com!!! (yes) [no] {maybe}",
)
_MAX_MARKUP_TOKENS = 4  # special tokens whose markup is checked (the chat markers come first in vocabularies)


def _markup_texts(special_tokens: list[str]) -> list[str]:
    """Strings that mix the checkpoint's special tokens with text, as a chat prompt does."""
    texts = []
    for token in special_tokens[:_MAX_MARKUP_TOKENS]:
        texts += [f"{token}user\nWhat is 2+2?{token}\n", f"text before {token} and after"]
    return texts


def _first_difference(ours: list[int], theirs: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))


def check_gguf_tokenizer(gguf_path: Path, model_dir: Path) -> dict[str, Any]:
    """Raise ExportError naming the first string llama.cpp tokenizes differently; return facts for the manifest."""
    from edgeopt.exporters.gguf.vocab_common import read_json
    from edgeopt.runtimes.bundle_tokenizer import open_tokenizer
    from edgeopt.runtimes.llama_cpp.tokenizer import gguf_vocabulary

    tokenizer_json = Path(model_dir) / "tokenizer.json"
    if not tokenizer_json.is_file():
        return {"tokenizer_check": "skipped: the checkpoint has no tokenizer.json to compare with"}
    reference = open_tokenizer(tokenizer_json)
    added = read_json(tokenizer_json).get("added_tokens", [])
    texts = [*CHECK_TEXTS, *_markup_texts([t["content"] for t in added if t.get("special")])]
    with gguf_vocabulary(gguf_path) as llama:
        for text in texts:
            ours = reference.encode(text, add_special_tokens=False).ids
            theirs = llama.encode(text, add_special=False, parse_special=True)
            if ours != theirs:
                at = _first_difference(ours, theirs)
                raise ExportError(
                    f"llama.cpp reads {text!r} differently from the checkpoint's tokenizer: from token {at} on, "
                    f"tokenizer.json gives {ours[at:at + 6]}, llama.cpp gives {theirs[at:at + 6]}",
                    "this vocabulary would reach the device tokenized wrongly; use --format onnx for this model, "
                    "or report the tokenizer (its pre-tokenizer has no exact llama.cpp equivalent)")
    return {"tokenizer_check": f"llama.cpp matches tokenizer.json on {len(texts)} strings"}
