"""`edgeopt serve` asks the sizing for the logits rows its speculation mode can draft (edgeopt.sizing.shape's
ShapeRequest.draft_rows): none when off, n-gram's longest draft, or --draft-tokens with a draft model."""

from __future__ import annotations

from pathlib import Path

from edgeopt.engine.speculation.controller import MAX_DRAFT_TOKENS
from edgeopt.server.launcher import ServeOptions


def test_serve_options_ask_for_the_rows_of_the_longest_draft() -> None:
    assert ServeOptions().shape_request().draft_rows == 0
    assert ServeOptions(speculative="ngram").shape_request().draft_rows == MAX_DRAFT_TOKENS
    assert ServeOptions(speculative="auto").shape_request().draft_rows == MAX_DRAFT_TOKENS
    with_draft = ServeOptions(speculative="draft", draft=Path("draft.gguf"), draft_tokens=6)
    assert with_draft.shape_request().draft_rows == 6
