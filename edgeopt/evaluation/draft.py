"""How often a draft model's guesses would be accepted by its target, measured on held-out text.

At temperature 0 speculative decoding keeps a drafted token while it equals the target's greedy token
(docs/speculative_decoding.md): from a position, the draft proposes k tokens, the target keeps the longest
prefix that matches its own greedy continuation and adds one token of its own. So the figure that matters is
measured on the *target's* greedy text: contexts are cut from held-out text (never trained on), the target
(the checkpoint, in float32) continues each greedily, and the draft, as exported in the bundle, is run once
over context + continuation. Because every guess that is kept equals the target's token, the draft's guess
after an accepted prefix is exactly its prediction at that position of the target's text: one teacher-forced
pass gives whether the draft predicts each target token (``matches``), and replaying the rule over them gives
what speculation with k draft tokens would accept, step by step, as the engine does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import EvaluationError

SERVED_DRAFT_TOKENS = 4  # edgeopt serve --draft-tokens' default
REPLAYED_DRAFT_TOKENS = (1, 2, 4, 8)
CONTEXTS = 32
CONTEXT_TOKENS = 96
NEW_TOKENS = 64


@dataclass(frozen=True)
class Replay:
    """Greedy speculative decoding with k draft tokens, replayed over one or more continuations."""

    draft_tokens: int
    steps: int = 0  # target passes
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0  # tokens the steps produced: accepted ones plus the target's own

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0

    def __add__(self, other: Replay) -> Replay:
        assert self.draft_tokens == other.draft_tokens
        return Replay(self.draft_tokens, self.steps + other.steps, self.drafted + other.drafted,
                      self.accepted + other.accepted, self.emitted + other.emitted)


def replay(matches: Sequence[bool], draft_tokens: int) -> Replay:
    """Speculation over one continuation: ``matches[i]`` says whether the draft predicts the target's token i
    from the tokens before it. Each step drafts up to k tokens (fewer before the end), keeps the matching
    prefix, and emits one token more (the target's, where the prefix ends or after all k)."""
    steps = drafted = accepted = emitted = 0
    position, total = 0, len(matches)
    while position < total:
        proposed = min(draft_tokens, total - position)
        kept = 0
        while kept < proposed and matches[position + kept]:
            kept += 1
        made = min(kept + 1, total - position)
        steps, drafted, accepted, emitted = steps + 1, drafted + proposed, accepted + kept, emitted + made
        position += made
    return Replay(draft_tokens, steps, drafted, accepted, emitted)


def draft_matches(scorer: Any, rows: list[list[int]], context_lengths: list[int]) -> list[list[bool]]:
    """For each row (context + the target's continuation), whether the scorer's greedy token at each
    continuation position is the target's."""
    out = []
    for row, start in zip(rows, context_lengths):
        logits = scorer.score(row)
        predicted = np.argmax(logits[start - 1:len(row) - 1], axis=-1)
        out.append([bool(p == t) for p, t in zip(predicted.tolist(), row[start:])])
    return out


def summarize(matches: list[list[bool]]) -> dict[str, Any]:
    """The acceptance figures of a draft from its per-token matches (what the manifest keeps)."""
    tokens = sum(len(m) for m in matches)
    by_k = {}
    for k in REPLAYED_DRAFT_TOKENS:
        total = sum((replay(m, k) for m in matches), Replay(k))
        by_k[str(k)] = {"acceptance": round(total.acceptance, 4), "tokens_per_step": round(total.tokens_per_step, 4)}
    served = by_k[str(SERVED_DRAFT_TOKENS)]
    return {"target_tokens": tokens, "token_agreement": round(sum(map(sum, matches)) / tokens, 4),
            "draft_tokens": SERVED_DRAFT_TOKENS, "acceptance": served["acceptance"],
            "tokens_per_step": served["tokens_per_step"], "by_draft_tokens": by_k}


def held_out_contexts(target_dir: Path, eval_file: Path | None, data_file: Path | None, count: int = CONTEXTS,
                      length: int = CONTEXT_TOKENS) -> tuple[list[list[int]], str]:
    """(up to ``count`` contexts of ``length`` tokens, where they came from): consecutive pieces of --eval-data,
    else of --distil-data's held-out tail (the tokens the prune and distil passes never read)."""
    from edgeopt.passes.distil_data import read_data_file, split_tokens, tokenize
    from edgeopt.planning import HOLDOUT_TOKENS

    if eval_file is not None:
        ids, source = tokenize(target_dir, read_data_file(eval_file)).tolist(), f"{Path(eval_file).name}"
    elif data_file is not None:
        ids = split_tokens(target_dir, data_file, HOLDOUT_TOKENS)[1].tolist()
        source = f"{Path(data_file).name} (held-out tail)"
    else:
        raise EvaluationError("no held-out text to measure the draft's acceptance on",
                              "pass --distil-data FILE (its tail is held out) or --eval-data FILE")
    contexts = [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)][:count]
    if not contexts:
        raise EvaluationError(f"the held-out text ({source}) has {len(ids)} tokens, fewer than one context of "
                              f"{length}", "pass a longer --distil-data (or --eval-data) file")
    return contexts, source


def measure_acceptance(bundle_dir: Path, manifest: Any, target_dir: Path, eval_file: Path | None,
                       data_file: Path | None, new_tokens: int = NEW_TOKENS, threads: int = 2) -> dict[str, Any]:
    """The draft bundle's acceptance by ``target_dir`` on held-out text (see the module docstring)."""
    from edgeopt.measuring.scorers import HFScorer, load_bundle_scorer
    from edgeopt.measuring.eval_text import threads_following_load

    contexts, source = held_out_contexts(target_dir, eval_file, data_file)
    bos = _bos(target_dir)
    contexts = [([bos] if bos is not None else []) + c for c in contexts]
    with threads_following_load(threads) as governor:
        target = HFScorer(target_dir, governor.threads)
        try:
            rows = target.greedy_continuations(contexts, new_tokens, governor.before_decode)
        finally:
            target.close()
        scorer = load_bundle_scorer(bundle_dir, manifest, context=max(map(len, rows)), threads=governor.threads)
        try:
            matches = draft_matches(scorer, rows, [len(c) for c in contexts])
        finally:
            scorer.close()
    return {"held_out_text": source, "contexts": len(contexts), "context_tokens": len(contexts[0]),
            **summarize(matches)}


def _bos(model_dir: Path) -> int | None:
    """The BOS id when the tokenizer puts one before every text (as the evaluation windows do), else None."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return tokenizer.bos_token_id if getattr(tokenizer, "add_bos_token", False) else None
