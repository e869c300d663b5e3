"""Render a bundle's chat template (Hugging Face templates are jinja2) into a prompt string.

The template comes from ``manifest.chat_template`` or, failing that, the bundle's tokenizer directory
(``chat_template.jinja`` or ``tokenizer_config.json``). It runs in jinja2's immutable sandbox, with the
globals HF templates expect: ``raise_exception``, ``strftime_now``, ``bos_token``/``eos_token`` and the
``tojson`` filter. A template that refuses the conversation (``raise_exception``) becomes a 400.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgeopt.errors import BundleError, ChatTemplateError
from edgeopt.sources.tokenizer_config import chat_template_in


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        # trim_blocks/lstrip_blocks: HF renders templates this way; without them whitespace differs.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise BundleError(f"chat template has a syntax error at line {exc.lineno}: {exc.message}",
                              "fix chat_template in the bundle's manifest or tokenizer_config.json") from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               variables: dict[str, Any] | None = None) -> str:
        """``variables``: more names the template reads (``tools``, ``reasoning_effort``, ...)."""
        try:
            return self._template.render(**(variables or {}), messages=messages,
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template rejected the messages: {exc}",
                                    "check the roles and their order (many templates require user/assistant "
                                    "alternation)", param="messages") from exc

    @classmethod
    def from_bundle(cls, bundle_dir: Path, chat_template: str | None, tokenizer_dir: str,
                    special_tokens: dict[str, str] | None = None) -> ChatTemplate | None:
        """The bundle's template, or None when it has none (then only /v1/completions can be used).
        ``special_tokens``: bos_token/eos_token texts where no tokenizer_config.json exists (a GGUF file's)."""
        tok_dir = Path(bundle_dir) / tokenizer_dir
        config = {**(special_tokens or {}), **_read_tokenizer_config(tok_dir)}
        source = chat_template or chat_template_in(tok_dir, config)
        if not source:
            return None
        return cls(source, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))


def _read_tokenizer_config(tok_dir: Path) -> dict[str, Any]:
    path = tok_dir / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path} is not valid JSON: {exc}", "re-run edgeopt optimize") from exc


def _token_text(token: Any) -> str:
    """tokenizer_config stores special tokens as a string or as a serialized AddedToken dict."""
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return token or ""
