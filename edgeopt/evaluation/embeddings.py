"""How much did optimizing an encoder cost? Embedding cosines and nearest-neighbour agreement.

The decoder metrics (KL, top-1, perplexity) have no meaning for a sentence encoder; what a user of
embeddings cares about is that each vector still points the same way (cosine to the original's
vector) and that search still finds the same neighbours (for every text, is its nearest other text
the same under both models?). The original runs in transformers with the pooling of its
sentence-transformers configuration; the bundle runs through its own runtime, exactly as served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import EvaluationError
from edgeopt.measuring.metrics import neighbour_agreement, row_cosines
from edgeopt.sources.textfile import read_text_file

DEFAULT_MAX_TEXTS = 256
BATCH = 16
# Used without --data: pairs of paraphrases across topics, so that each text has a clear nearest
# neighbour and a quantization that scrambles the geometry shows up in neighbour agreement.
BUILTIN_TEXTS = (
    "The function returns a list of the dictionary's keys.",
    "This method gives back the keys of the mapping as a list.",
    "Open the file in binary mode before reading the image.",
    "Read the picture only after opening the file with mode 'rb'.",
    "The train to the airport leaves every twenty minutes.",
    "Trains depart for the airport three times an hour.",
    "Add two cups of flour and stir until the dough is smooth.",
    "Mix in the flour, two cups, and knead until the dough has no lumps.",
    "The battery lasts about ten hours on a single charge.",
    "One charge keeps the battery running for roughly ten hours.",
    "Heavy rain is expected in the north tomorrow afternoon.",
    "Tomorrow afternoon, the northern region will see strong rainfall.",
    "The server ran out of memory while loading the model.",
    "Loading the model exhausted the machine's RAM.",
    "She won the chess tournament without losing a game.",
    "Undefeated, she took first place at the chess championship.",
    "Reset the router by holding the button for ten seconds.",
    "To restart the router, press and hold its button for ten seconds.",
    "The museum is closed on Mondays and public holidays.",
    "On Mondays and holidays the museum does not open.",
    "A context manager releases the lock even after an exception.",
    "The lock is freed on exit from the with-block, even if an error was raised.",
    "Prices rose by three percent over the last year.",
    "Over the past twelve months, prices increased 3%.",
)


def evaluate_embedding_bundle(bundle_dir: Path, manifest: Any, original_model_dir: Path | None,
                              eval_data: Path | None, max_texts: int = DEFAULT_MAX_TEXTS,
                              threads: int = 2) -> dict[str, Any]:
    """Cosine of the bundle's embeddings to the original's, and nearest-neighbour agreement."""
    if original_model_dir is None:
        raise EvaluationError("an embedding bundle is measured against its original model, and none was given",
                              "drop --no-original, or pass --original MODEL")
    texts, source = _texts(eval_data, max_texts)
    reference, candidate = embedding_pairs(bundle_dir, manifest, Path(original_model_dir), texts, threads)
    cosines = row_cosines(reference, candidate)
    return {"embedding_cosine_mean": round(float(cosines.mean()), 6),
            "embedding_cosine_min": round(float(cosines.min()), 6),
            "neighbour_agreement": round(neighbour_agreement(reference, candidate), 4),
            "eval_texts": len(texts), "eval_source": source}


def embedding_pairs(bundle_dir: Path, manifest: Any, original_model_dir: Path, texts: list[str],
                    threads: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(original's, bundle's) embeddings of ``texts``, row for row, both fed the same unpadded ids."""
    from edgeopt.runtimes import load_embedding_runtime

    runtime = load_embedding_runtime(manifest.runtime, Path(bundle_dir), manifest, threads=threads)
    try:
        # Long lines are cut as sentence-transformers cuts them (to max_seq_length, specials kept); the
        # ids are unpadded, so neither model below pools over padding.
        token_ids = runtime.tokenize(texts, truncate=True)
        candidate = np.concatenate([runtime.embed_ids(token_ids[i:i + BATCH]) for i in range(0, len(texts), BATCH)])
    finally:
        runtime.close()
    reference = _original_embeddings(original_model_dir, token_ids, threads)
    if reference.shape != candidate.shape:
        raise EvaluationError(f"embedding shapes differ: original {reference.shape}, bundle {candidate.shape}",
                              "evaluate against the checkpoint this bundle was made from (--original)")
    return reference, candidate


def _texts(eval_data: Path | None, max_texts: int) -> tuple[list[str], str]:
    """One text per non-empty line of the file (the unit users embed), else the built-in pairs."""
    if eval_data is None:
        return list(BUILTIN_TEXTS), f"builtin:{len(BUILTIN_TEXTS)} paraphrase pairs"
    text = read_text_file(eval_data, "evaluation data", "--eval-data/--data", EvaluationError)
    lines = [line.strip() for line in text.splitlines() if line.strip()][:max_texts]
    if len(lines) < 2:
        raise EvaluationError(f"evaluation data {eval_data} has {len(lines)} non-empty line(s); an embedding "
                              "bundle is evaluated on one text per line", "pass a file with at least 2 lines")
    return lines, f"file:{Path(eval_data).name}"


def _original_embeddings(model_dir: Path, token_ids: list[list[int]], threads: int) -> np.ndarray:
    """The original checkpoint with the pooling of its own sentence-transformers configuration."""
    import torch

    from edgeopt.measuring.reference_embeddings import torch_embeddings
    from edgeopt.encoders.pooling import read_sentence_transformers_pooling

    torch.set_num_threads(threads)
    return torch_embeddings(model_dir, token_ids, read_sentence_transformers_pooling(model_dir), BATCH)
