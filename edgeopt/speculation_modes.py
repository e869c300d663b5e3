"""Speculative decoding's modes, and the logits rows each may draft: what the CLI, `edgeopt plan` and the
serving shape need without importing the engine that runs them (edgeopt.engine.speculation)."""

from __future__ import annotations

from edgeopt.errors import ConfigError

# auto: the best source available (a draft model when serve has --draft, else n-gram lookup); draft: --draft's
SPECULATIVE_MODES = ("off", "ngram", "auto", "draft")
DEFAULT_MODE = "auto"  # serve's --speculative without --draft (docs/speculative_decoding.md: measured not to lose)
MAX_DRAFT_TOKENS = 10  # an n-gram draft's longest
DEFAULT_DRAFT_TOKENS = 4  # serve --draft-tokens: tokens a draft model proposes a step


def check_mode(mode: str) -> None:
    if mode not in SPECULATIVE_MODES:
        raise ConfigError(f"--speculative {mode!r} is not a speculation mode",
                          f"use one of {', '.join(SPECULATIVE_MODES)}")


def longest_draft(mode: str, draft_tokens: int | None = None) -> int:
    """The most tokens one sequence's draft carries in ``mode`` (0 for off), so the logits rows a verification
    pass needs beyond the sequence's own: ``draft_tokens`` with a draft model, else n-gram's MAX_DRAFT_TOKENS."""
    check_mode(mode)
    if mode == "off":
        return 0
    return draft_tokens if draft_tokens is not None else MAX_DRAFT_TOKENS
