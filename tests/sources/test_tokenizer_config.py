"""One chat-template lookup for the manifest (pipeline), the GGUF vocabulary and the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.optimize.pipeline import _chat_template as manifest_template
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.sources.tokenizer_config import chat_template_in
from edgeopt.exporters.gguf.vocab_common import _chat_template as gguf_template

NAMED = [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEF"}]


def readers(tok_dir: Path) -> list[str | None]:
    served = ChatTemplate.from_bundle(tok_dir.parent, None, tok_dir.name)
    return [manifest_template(tok_dir), gguf_template(tok_dir), served.source if served else None]


@pytest.mark.parametrize("template,expected", [
    ("PLAIN", "PLAIN"),
    (NAMED, "DEF"),  # list form: the "default" entry, as transformers and llama.cpp's converter pick it
    ([{"name": "tool_use", "template": "TOOLS"}], None),  # no default: transformers refuses it too
    (None, None),
])
def test_every_reader_finds_the_same_template(tmp_path: Path, template, expected) -> None:
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    assert chat_template_in(tok, {"chat_template": template}) == expected
    assert readers(tok) == [expected] * 3


def test_the_jinja_file_wins_for_every_reader(tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": NAMED}))
    (tok / "chat_template.jinja").write_text("FILE")
    assert readers(tok) == ["FILE"] * 3
