"""Score token sequences with a GGUF model through llama-cpp-python: logits for every position."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import EvaluationError

# Llama's constructor points the process's stdout and stderr at /dev/null while it loads (llama-cpp-python's
# suppress_stdout_stderr: dup2 over fds 1 and 2, restored after). Two loads at once can each restore the other's
# /dev/null and silence the process for good, so scorers built side by side (the mix's groups) load in turn.
_LOADING = threading.Lock()


class GGUFScorer:
    """Implements edgeopt.measuring.scorers.Scorer for a GGUF file."""

    def __init__(self, model_path: Path, context: int = 512, threads: int = 2, kv_type: str = "f32") -> None:
        try:
            from llama_cpp import Llama

            from edgeopt.runtimes.llama_cpp.amx_guard import guard_amx_buffers
            from edgeopt.runtimes.llama_cpp.kv_type import GGML_KV_TYPES
        except ImportError as exc:
            raise EvaluationError("scoring a GGUF bundle needs llama-cpp-python", "pip install llama-cpp-python") from exc
        self.context = context
        # logits_all keeps a logits row per evaluated token, which perplexity and KL need. The KV cache is
        # f32 by default so the numbers measure the model file, not llama.cpp's default f16 cache rounding;
        # another kv_type measures that cache (edgeopt.evaluation.kv_cache), with the flash attention a quantized
        # cache needs and that its f16 reference then uses too, so that only the cache's type differs.
        guard_amx_buffers()  # Llama has no argument for it; AMX buffers crash decoding on AMX CPUs
        with _LOADING:
            self._llm = Llama(model_path=str(model_path), n_ctx=context, n_batch=context, n_ubatch=context,
                              logits_all=True, n_threads=threads, n_threads_batch=threads, verbose=False,
                              type_k=GGML_KV_TYPES[kv_type], type_v=GGML_KV_TYPES[kv_type], flash_attn=kv_type != "f32")
        self.vocab_size = self._llm.n_vocab()

    def score(self, token_ids: list[int]) -> np.ndarray:
        if len(token_ids) > self.context:
            raise EvaluationError(f"window of {len(token_ids)} tokens exceeds the scorer context {self.context}",
                                  "evaluate in shorter windows")
        self._llm.reset()
        self._llm.eval(token_ids)
        return np.array(self._llm.scores[: len(token_ids)], dtype=np.float32)

    def tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def close(self) -> None:
        from edgeopt.runtimes.heap import return_freed_heap

        self._llm.close()
        # what the model and its logits held stays in glibc's heaps otherwise, a heap per scoring thread: the mix's
        # groups, scored two at a time, peaked at 683 MiB anonymous on SmolLM2, 570 MiB with this
        return_freed_heap()


def load_scorer(bundle_dir: Path, manifest: Any, context: int = 512, threads: int = 2,
                kv_type: str = "f32") -> GGUFScorer:
    """``kv_type``: the cache to score with; f32 (the default) for the weights' own quality, another type to
    measure that cache's cost (edgeopt.evaluation.kv_cache)."""
    return GGUFScorer(Path(bundle_dir) / manifest.model_file, context=context, threads=threads, kv_type=kv_type)


class _VocabularyTokenizer:
    """The evaluation's tokenizer over a GGUF's own vocabulary (the ids llama-perplexity would score)."""

    def __init__(self, vocabulary: Any) -> None:
        import llama_cpp

        self._vocabulary = vocabulary
        raw = vocabulary._vocab  # the llama_vocab pointer LlamaCppTokenizer wraps
        self.bos = int(llama_cpp.llama_vocab_bos(raw)) if llama_cpp.llama_vocab_get_add_bos(raw) else None

    def encode(self, text: str) -> list[int]:
        return self._vocabulary.encode(text, add_special=False, parse_special=False)


@contextmanager
def eval_tokenizer(bundle_dir: Path, manifest: Any) -> Iterator[_VocabularyTokenizer]:
    from edgeopt.runtimes.llama_cpp.tokenizer import gguf_vocabulary

    with gguf_vocabulary(Path(bundle_dir) / manifest.model_file) as vocabulary:
        yield _VocabularyTokenizer(vocabulary)
