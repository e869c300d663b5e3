"""The original model as the evaluation's reference, read by llama.cpp from its unquantized GGUF
(exporters/gguf/unquantized.py): the file the export already wrote, memory-mapped, instead of the checkpoint
loaded in float32 by transformers (an 8B: 32 GB of the process's own memory; the F16 file is page cache).

What ``llama-perplexity --kl-divergence`` compares a quantized file with: the F16 file's logits. The reference's
KV cache is f32 (GGUFScorer's default), so its logits are the weights', not a cache's rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgeopt.exporters.gguf.scorer import GGUFScorer
from edgeopt.measuring.reference_logits import StoredLogits
from edgeopt.progress import progress

GENERATOR = "llama.cpp"  # names the evaluation text this reference writes (edgeopt.measuring.eval_text's key)


class GGUFReference:
    """Implements edgeopt.measuring.scorers.Reference. The file is opened for scoring on the first window only:
    while the evaluation text is written the generator's runtime alone maps it (two mappings of one file count
    twice in the process's resident memory)."""

    generator = GENERATOR
    keeps_logits = True

    def __init__(self, path: Path, context: int, threads: int) -> None:
        self.path = Path(path)
        self._context, self._threads = context, threads
        self._scorer: GGUFScorer | None = None

    def score(self, token_ids: list[int]) -> np.ndarray:
        if self._scorer is None:
            self._scorer = GGUFScorer(self.path, context=self._context, threads=self._threads)
        return self._scorer.score(token_ids)

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None

    def greedy_continuations(self, prompt_ids: list[list[int]], max_new_tokens: int,
                             on_step: Callable[[], None] = lambda: None,
                             logits: StoredLogits | None = None) -> list[list[int]]:
        """Every prompt followed by its greedy continuation (``max_new_tokens``, fewer where the model ends it
        with an end-of-sequence token, which is kept), all decoded together: one pass over the weights per step
        for every prompt (the serving runtime's batched step; its threads follow the load).

        ``logits``: window i gets row i's logits at every position but its last, which is what scoring
        ``row[:-1]`` gives, so the evaluation need not run the original over its text again (at 8B that pass was
        54 s). The cache is f32 and attention plain, as the scorer's, so the rows are the scorer's rows."""
        from edgeopt.runtimes.base import StepInput
        from edgeopt.runtimes.llama_cpp import load_gguf
        from edgeopt.sizing.attention import OFF
        from edgeopt.sizing.kv_types import REFERENCE_KV_TYPE
        from edgeopt.sizing.layout import STREAMS, stream_cells

        longest = max(len(p) for p in prompt_ids) + max_new_tokens
        runtime = load_gguf(self.path, kv_capacity_tokens=len(prompt_ids) * stream_cells(longest),
                            max_slots=len(prompt_ids), max_batch_tokens=max(512, sum(map(len, prompt_ids))),
                            context_length=longest, cache_slots=0, kv_layout=STREAMS, kv_type=REFERENCE_KV_TYPE,
                            flash_attention=OFF)
        try:
            eos = runtime.info.eos_token_ids
            rows = [list(p) for p in prompt_ids]
            batch = [StepInput(slot, list(p), 0, want_logits=True, all_logits=logits is not None)
                     for slot, p in enumerate(prompt_ids)]
            for _ in progress(range(max_new_tokens), f"evaluation text: {len(rows)} greedy continuations"):
                out, at = runtime.step(batch), 0
                for item in batch:  # rows come back in batch order, len(tokens) of them for all_logits
                    taken = len(item.tokens) if item.all_logits else 1
                    if logits is not None:
                        logits.extend(item.slot, out[at:at + taken])
                    rows[item.slot].append(int(np.argmax(out[at + taken - 1])))
                    at += taken
                on_step()
                batch = [StepInput(slot, [row[-1]], len(row) - 1, want_logits=True) for slot, row in enumerate(rows)
                         if row[-1] not in eos and len(row) - len(prompt_ids[slot]) < max_new_tokens]
                if not batch:
                    break
            return rows
        finally:
            runtime.close()


def load_reference(original_model_dir: Path, workbench: Path, context: int, threads: int) -> GGUFReference:
    """The reference over ``original_model_dir``'s unquantized GGUF in ``workbench``: the one the export wrote
    when the bundle was made from that checkpoint without passes, else converted now."""
    from edgeopt.exporters.gguf.unquantized import unquantized_gguf

    path, _facts = unquantized_gguf(Path(original_model_dir), Path(workbench))
    return GGUFReference(path, context=context, threads=threads)
