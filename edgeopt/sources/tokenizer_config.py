"""The chat template a checkpoint's tokenizer directory carries, found one way for every reader (the
pipeline writing the manifest, the GGUF vocabulary, the server).

Where it lives: ``chat_template.jinja`` beside the config (newer transformers), else tokenizer_config.json's
``chat_template``: a string, or a list of ``{"name", "template"}`` (models shipping e.g. "default" and
"tool_use"). From a list the "default" one serves chat, as transformers' apply_chat_template picks it
(and refuses a list without one) and llama.cpp's converter writes it as ``tokenizer.chat_template``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def chat_template_in(tok_dir: Path, config: dict[str, Any]) -> str | None:
    """``config`` is the directory's parsed tokenizer_config.json ({} when it has none)."""
    jinja_file = tok_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    template = config.get("chat_template")
    if isinstance(template, list):
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else None
