"""`edgeopt serve` asks the sizing for the logits rows its speculation mode can draft (edgeopt.sizing.shape's
ShapeRequest.draft_rows): none when off, n-gram's longest draft, or --draft-tokens with a draft model. (`edgeopt
plan` counts the rows of serve's default mode: tests/server/test_resident_memory.py holds the two to one figure.)"""

from __future__ import annotations

from pathlib import Path

from edgeopt.cli.commands.serve_cmd import speculative_mode
from edgeopt.server.startup.launcher import ServeOptions
from edgeopt.speculation_modes import MAX_DRAFT_TOKENS


def test_serve_options_ask_for_the_rows_of_the_longest_draft() -> None:
    assert ServeOptions(speculative="off").shape_request().draft_rows == 0
    assert ServeOptions().shape_request().draft_rows == MAX_DRAFT_TOKENS  # auto, the default
    assert ServeOptions(speculative="ngram").shape_request().draft_rows == MAX_DRAFT_TOKENS
    assert ServeOptions(speculative="auto").shape_request().draft_rows == MAX_DRAFT_TOKENS
    with_draft = ServeOptions(speculative="draft", draft=Path("draft.gguf"), draft_tokens=6)
    assert with_draft.shape_request().draft_rows == 6


def test_auto_is_serve_s_default_and_draft_with_a_draft_model() -> None:
    assert speculative_mode(None, None, several=False) == "auto"
    assert speculative_mode(None, Path("draft.gguf"), several=False) == "draft"
    assert speculative_mode("off", None, several=True) == "off"

