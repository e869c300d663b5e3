"""Calibration text a model writes itself, sampled through a serving runtime's batched step: what an export
computes its activation statistics from when no ``--calibration-data`` is given (GGUF: the importance matrix,
exporters/gguf/self_calibration.py; ONNX INT4: the weighting of its 4-bit blocks, exporters/onnx/self_calibration.py).

Why seed prompts: unprompted, a small model tends to one register; openings of prose, code, dialogue, lists,
letters and docs spread the activations over the kinds of text a user sends. Sampling (temperature, a min-p
floor against the long tail of junk tokens, a fixed seed) is plain numpy over the runtime's logits, so the same
model and seed give the same tokens. End-of-generation tokens are never sampled: every chunk is ``chunk_size``
tokens of text, as a chunk of real text would be.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError
from edgeopt.progress import progress
from edgeopt.runtimes.base import Runtime, StepInput

# Plain-text openings of different kinds of writing (the instruct models edgeopt targets see all of them).
SEED_PROMPTS = (
    "The history of the old harbour town begins",
    "def load_config(path):\n    \"\"\"Read the settings file and",
    "\"Where were you last night?\" she asked.\n\"",
    "Things to check before a long hike:\n1.",
    "Question: Why does the sky look blue during the day?\nAnswer:",
    "Dear team,\n\nThank you all for",
    "## Installation\n\nTo install the package, run",
    "In this recipe we will make a simple tomato soup. First,",
)
# Without calibration text, self-generated text's matrix gets 96-101% of real text's KL gain on
# SmolLM2-135M (docs/gguf-importance-matrix.md, tests/bench/bench_self_calibration.py): on by default.
SELF_CALIBRATION_DEFAULT = True
DEFAULT_CHUNKS = 8  # 8 x 512 tokens: what the measured figures in docs/gguf-importance-matrix.md used
DEFAULT_SEED = 0
TEMPERATURE = 0.9
MIN_P = 0.02  # drop tokens under 2% of the likeliest one's probability (llama.cpp's min-p sampler)
MAX_PARALLEL = 8  # sequences decoded together: one decode step reads the weights once for all of them


@dataclass(frozen=True)
class GeneratedText:
    chunks: list[list[int]]  # token ids, each chunk one independent sequence (BOS first when the model adds one)
    prompts: int  # distinct seed prompts the chunks start from
    seed: int
    temperature: float
    min_p: float
    seconds: float

    @property
    def tokens(self) -> int:
        return sum(len(c) for c in self.chunks)

    @property
    def source(self) -> str:
        """How the manifest names the calibration text."""
        return f"generated: {self.tokens} tokens from {self.prompts} seed prompts"

    def facts(self) -> dict[str, Any]:
        """What a manifest records about the text (beside the token counts the caller adds)."""
        return {"source": self.source, "tokens_sha256": self.sha256(),
                "generated": {"seed": self.seed, "temperature": self.temperature, "min_p": self.min_p,
                              "prompts": self.prompts, "seconds": self.seconds}}

    def sha256(self) -> str:
        """Hash of the token ids (int32, chunk after chunk): identifies the calibration text."""
        digest = hashlib.sha256()
        for chunk in self.chunks:
            digest.update(np.asarray(chunk, dtype=np.int32).tobytes())
        return digest.hexdigest()


def self_calibrates(options: dict[str, Any]) -> bool:
    """Whether an export without calibration text measures on text the model writes itself (the default)."""
    return options.get("calibration_data") is None and bool(options.get("self_calibration", SELF_CALIBRATION_DEFAULT))


def sample_text(runtime: Runtime, chunks: int = DEFAULT_CHUNKS, chunk_size: int = 512, parallel: int = MAX_PARALLEL,
                seed: int = DEFAULT_SEED, temperature: float = TEMPERATURE, min_p: float = MIN_P,
                prompts: tuple[str, ...] = SEED_PROMPTS, report: Callable[[str], None] = lambda _m: None) -> GeneratedText:
    """Sample ``chunks`` sequences of ``chunk_size`` tokens, ``parallel`` at a time in the runtime's slots 0..;
    sequence i starts from seed prompt i mod len(prompts) (at most half a chunk of it)."""
    check_budget(chunks, chunk_size, temperature, prompts)
    started = time.perf_counter()
    context = runtime.info.context_length
    if context < chunk_size:
        raise ConfigError(f"the model holds {context} tokens per sequence, less than a chunk of {chunk_size}",
                          "lower the chunk size to the model's context")
    starts = [runtime.tokenizer.encode(p, add_special=True)[:chunk_size // 2] for p in prompts]
    banned = np.array(sorted(runtime.info.eos_token_ids), dtype=np.int64)
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    for first in progress(range(0, chunks, parallel), f"self-calibration: writing {chunks} sequences"):
        group = [list(starts[i % len(starts)]) for i in range(first, min(first + parallel, chunks))]
        out += _sample_group(runtime, group, chunk_size, rng, banned, temperature, min_p)
        report(f"self-calibration: {len(out)}/{chunks} sequences of {chunk_size} tokens")
    return GeneratedText(chunks=out, prompts=min(len(prompts), chunks), seed=seed, temperature=temperature,
                         min_p=min_p, seconds=round(time.perf_counter() - started, 2))


def check_budget(chunks: int, chunk_size: int, temperature: float, prompts: tuple[str, ...]) -> None:
    """Refuse, before a model is opened, what cannot be sampled."""
    if chunks < 1 or chunk_size < 16 or temperature <= 0 or not prompts:
        raise ConfigError(f"self-calibration needs chunks >= 1, chunk_size >= 16, temperature > 0 and a seed prompt "
                          f"(got chunks={chunks}, chunk_size={chunk_size}, temperature={temperature}, "
                          f"{len(prompts)} prompts)", "pass calibration_chunks >= 1, or give --calibration-data")


def _sample_group(runtime: Runtime, sequences: list[list[int]], length: int, rng: np.random.Generator,
                  banned: np.ndarray, temperature: float, min_p: float) -> list[list[int]]:
    """Extend every sequence to ``length`` tokens: the prompts in as few steps as the runtime's batch holds, then
    one token each per step."""
    for slot in range(len(sequences)):
        runtime.release(slot)  # the previous group's cells
    prompts = [StepInput(slot, list(seq), 0, want_logits=True) for slot, seq in enumerate(sequences)]
    for batch in _within(prompts, runtime.max_batch_tokens):
        _extend(runtime, batch, sequences, rng, banned, temperature, min_p)
    while batch := [StepInput(slot, [seq[-1]], len(seq) - 1, want_logits=True)
                    for slot, seq in enumerate(sequences) if len(seq) < length]:
        _extend(runtime, batch, sequences, rng, banned, temperature, min_p)
    return sequences


def _extend(runtime: Runtime, batch: list[StepInput], sequences: list[list[int]], rng: np.random.Generator,
            banned: np.ndarray, temperature: float, min_p: float) -> None:
    for item, row in zip(batch, runtime.step(batch)):  # rows come back in batch order
        sequences[item.slot].append(_sample(row, rng, banned, temperature, min_p))


def _within(items: list[StepInput], max_tokens: int | None) -> list[list[StepInput]]:
    """``items`` in steps of at most ``max_tokens`` tokens (many sequences' prompts overflow one batch)."""
    steps: list[list[StepInput]] = [[]]
    for item in items:
        held = sum(len(i.tokens) for i in steps[-1])
        if steps[-1] and max_tokens is not None and held + len(item.tokens) > max_tokens:
            steps.append([])
        steps[-1].append(item)
    return steps


def _sample(logits: np.ndarray, rng: np.random.Generator, banned: np.ndarray, temperature: float,
            min_p: float) -> int:
    """One token by min-p sampling. Only the candidates min-p keeps (a few dozen of a 128k vocabulary) are
    exponentiated and drawn from: the same token and the same draw from ``rng`` as over the whole row, whose
    dropped entries are zeros that leave the cumulative probabilities unchanged, at a tenth of the time (on the
    1B shape a whole-row draw per sequence and step was 14 s of the 122 s self-calibration)."""
    row = np.array(logits, dtype=np.float32)  # a copy: the banned ids are overwritten
    row[banned] = -np.inf
    # A little below min-p's cut in float32, then the exact float64 test on what passes (min_p 0 keeps every token).
    top = float(row.max())
    floor = top + temperature * math.log(min_p) - 1e-3 * (1.0 + abs(top)) if min_p > 0 else -math.inf
    candidates = np.flatnonzero(row >= np.float32(floor))
    scaled = row[candidates].astype(np.float64) / temperature
    probs = np.exp(scaled - scaled.max())
    probs[probs < min_p * probs.max()] = 0.0
    probs /= probs.sum()
    return int(candidates[rng.choice(probs.size, p=probs)])
