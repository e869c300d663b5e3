"""The evaluation text the original model writes itself when the user gives none: greedy continuations of a
few seed prompts, generated once per model and kept in the step cache.

What the text is for: KL divergence and top-1 agreement compare the bundle's next-token distributions with
the original's on the same tokens; on text the original itself wrote, they say how faithfully the optimized
model reproduces the original's own behaviour (edgeopt.evaluation.causal_lm). The text depends on the original model
and the seed prompts only, not on the bundle, so every bundle made from one model (each quant, each
target, each re-run of ``make demo``) is measured on the same tokens, and they are generated once.

Why it was slow and is not now: transformers' ``generate`` ran one prompt at a time on 2 torch threads. Each
decode step is a few hundred small operations, each ending at an OpenMP barrier; with other processes on the
cores, the thread that was descheduled holds every barrier up (the cold ``make demo`` spent 755 s here on a
host loaded by four other jobs, for 384 tokens). Now the prompts decode as one left-padded batch (one pass
over the weights per step for all of them), with as many threads as the cores other processes leave free,
re-measured while decoding (runtimes/llama_cpp/threads.py, the same rule llama.cpp decodes by). Measured side by
side on SmolLM2-135M, 4 prompts x 32 tokens, load average ~12 on 2 cores: one at a time on 1 thread 52 s, as one
batch on 1 thread 20 s (the same tokens), one at a time on 2 threads unfinished after 6 minutes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.store.bundle import content_hash
from edgeopt.store.cache import cached_step, step_key

if TYPE_CHECKING:
    from edgeopt.measuring.reference_logits import StoredLogits
    from edgeopt.measuring.scorers import Reference
    from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor

# Eight openings of 48 tokens each rather than four of 96: the same ~400 tokens in half the decode steps, and
# each step is a pass over every weight at 4-8 rows (memory-bound: on the 8B shape 96 steps took 131 s).
SEED_PROMPTS = (
    "The function returns",
    "To open a file in Python,",
    "Class documentation:",
    "This module provides",
    "Once upon a time, in a small village,",
    "Q: How do I reverse a list in Python?\nA:",
    "Dear customer,\n\nThank you for",
    "Steps to reset the router:\n1.",
)
GENERATED_TOKENS_PER_PROMPT = 48
# Bump when the generation changes the tokens it writes for the same model and prompts (part of the cache key).
GENERATION_VERSION = 3  # 3: llama.cpp writes it with an f32 KV cache (the logits it keeps are the scorer's)
IDS_FILE = "eval_ids.json"


def generated_eval_rows(original_model_dir: Path, reference: Reference, prompt_ids: list[list[int]],
                        on_step: Callable[[], None] = lambda: None, tokens_per_prompt: int = GENERATED_TOKENS_PER_PROMPT,
                        logits: StoredLogits | None = None) -> tuple[list[list[int]], bool]:
    """(every prompt (``prompt_ids``: the seed prompts tokenized, each after BOS when the model expects one)
    followed by its greedy continuation by ``reference``, a row each; whether they came from the cache).
    ``on_step`` runs after every decode step (a :func:`threads_following_load` governor's ``before_decode``).
    ``logits``: where a reference that ``keeps_logits`` puts the logits it wrote each row with, window i row i's
    at every position but the last; left empty when the rows come from the cache."""
    params = {"prompts": prompt_ids, "tokens_per_prompt": tokens_per_prompt, "version": GENERATION_VERSION,
              "generator": reference.generator}
    key = step_key("eval-text", "greedy", params, content_hash(Path(original_model_dir)))

    def generate(out: Path) -> dict[str, Any]:
        kept = logits if reference.keeps_logits else None
        rows = reference.greedy_continuations(prompt_ids, tokens_per_prompt, on_step, logits=kept)
        (out / IDS_FILE).write_text(json.dumps(rows))
        return {"tokens": sum(len(r) for r in rows)}

    entry, _meta, cached = cached_step(key, generate)
    return json.loads((entry / IDS_FILE).read_text()), cached


@contextmanager
def threads_following_load(max_threads: int) -> Iterator[ThreadGovernor]:
    """A governor of the evaluation's threads: the cores other processes leave free (at most ``max_threads``),
    measured now and again whenever ``before_decode()`` is called after its interval, as llama.cpp's
    ThreadGovernor does while serving. ``.threads`` is the count measured now (what runtimes opened in the block
    are given). torch's own count follows it only where torch is already imported (a transformers reference):
    a GGUF evaluation never imports torch (its 0.5 GB of libraries would be the step's largest cost on a small
    model); torch's count is restored after the block."""
    import sys

    from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor

    def follow(threads: int) -> None:
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)

    before = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    governor = ThreadGovernor(follow, max_threads)
    follow(governor.threads)
    try:
        yield governor
    finally:
        if before is not None:
            sys.modules["torch"].set_num_threads(before)
