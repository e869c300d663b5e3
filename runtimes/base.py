"""The contract between the serving engine and an inference backend.

The engine owns scheduling, sampling and KV *accounting*; a runtime owns the model and the KV
*storage*. Each running sequence is bound to a ``slot`` (llama.cpp's sequence id) for its lifetime.
Everything crossing this boundary is plain ints, lists and numpy arrays, so the engine never imports
torch.

What a runtime can do is declared here, never discovered: a capability is a typed attribute or method of
:class:`Runtime` with the default that suits most backends, and a runtime class subclasses
:class:`Runtime` explicitly to inherit those defaults and override what differs. A new capability (a
prefix cache, a grammar mask) is one more member here, with its default. Embedding models are served by
an :class:`EmbeddingRuntime`, which has no KV cache and no step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from edgeopt.errors import ENGINE_BUG_HINT, BackendError

Row = TypeVar("Row")  # one position's logits: a numpy or torch vector


@dataclass(frozen=True)
class StepInput:
    """One sequence's share of a batched forward pass."""

    slot: int  # KV slot owned by the sequence; 0 <= slot < RuntimeInfo.max_slots
    tokens: list[int]  # new tokens: a prefill chunk, or the single token sampled last step
    start_pos: int  # position of tokens[0]; the slot's KV holds exactly positions [0, start_pos)
    want_logits: bool  # return next-token logits after the last of ``tokens``
    # Return the logits after *every* token of ``tokens`` (len(tokens) rows, the last one being the
    # want_logits row): prompt logprobs (completions' echo). Only for runtimes whose
    # RuntimeInfo.position_logits is True.
    all_logits: bool = False


@dataclass(frozen=True)
class RuntimeInfo:
    vocab_size: int
    kv_capacity_tokens: int  # KV cells shared by all slots
    max_slots: int  # concurrent sequences the backend can hold
    context_length: int  # longest single sequence the model supports here
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    bos_token_id: int | None = None
    add_bos: bool = False
    # Prefix cache: sequence ids max_slots .. max_slots + cache_slots - 1 hold cached prefixes (never
    # stepped; the engine drives them with share_kv / trim / release). 0: no prefix cache.
    cache_slots: int = 0
    # True when share_kv makes both sequences use the *same* KV cells (llama.cpp's unified cache);
    # False when it copies them (the engine then charges the copy to the target).
    shares_kv_cells: bool = False
    # The runtime can save a cache entry's KV to a file and load it back (edgeopt serve --warm).
    saves_prefix_state: bool = False
    position_logits: bool = False  # step() honours StepInput.all_logits (prompt logprobs)
    # trim() works on running slots too, not only on cache entries: the engine can feed guessed tokens
    # (speculative decoding) and drop the KV of those the model did not agree with.
    trims_kv: bool = False
    # One pass carries the same number of tokens of every sequence in it (llama.cpp's per-sequence streams):
    # a step mixing a 1-token decode with a longer input costs more than one pass over the weights.
    splits_mixed_lengths: bool = False


class Tokenizer(Protocol):
    """Byte-exact tokenizer view: text in, ids out; ids back to raw bytes for streaming."""

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """``add_special``: add BOS/EOS as the model wants. ``parse_special``: special-token text in ``text``
        (``<|im_start|>``) becomes that control token; False tokenizes it as plain characters."""
        ...

    def control_token_texts(self) -> tuple[str, ...]:
        """Texts that ``parse_special`` turns into control tokens."""
        ...

    def control_token_ids(self) -> dict[str, int]:
        """Each control token's text -> its id (the tokens ``token_bytes`` gives b"" for), so a grammar can
        name them (a tool-call grammar's ``<|python_tag|>``) while text never produces them."""
        ...

    def max_token_bytes(self) -> int | None:
        """Most bytes of input text one token can stand for (None: no bound), so a text of B bytes is at
        least ceil(B / max_token_bytes) tokens; lets the server refuse a huge prompt before tokenizing it."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of one token (may be a partial UTF-8 sequence); b"" for control tokens."""
        ...




class Runtime(Protocol):
    """A text-generation backend that edgeopt's engine drives one step at a time."""

    info: RuntimeInfo
    tokenizer: Tokenizer
    # Fixed batch buffer: one step may carry at most this many tokens (llama.cpp's n_batch), so the engine's
    # step_token_budget must not exceed it. None: the runtime takes a step of any size.
    max_batch_tokens: int | None = None
    # Logits rows one step returns without splitting the pass (llama.cpp's n_outputs_max). None: any number.
    max_logit_rows: int | None = None
    # What a decode pass's cost depends on (the model file, threads, KV type and layout, attention kernel, batch):
    # a runtime made alike again (a model swapped back in) reuses the cost measured for the first
    # (edgeopt.engine.speculation.calibration). None: measured at every engine start.
    pass_cost_key: Hashable | None = None

    def step(self, batch: list[StepInput]) -> np.ndarray:
        """Run one forward pass over every input; return float32 logits of shape (rows, vocab_size), in
        batch order: one row per input with want_logits, or len(tokens) rows for an input with all_logits."""
        ...

    def release(self, slot: int) -> None:
        """Forget the slot's KV (finished, aborted or preempted sequence, or an evicted cache entry)."""
        ...

    def share_kv(self, source: int, target: int, start: int, end: int) -> None:
        """``target``, which holds exactly positions [0, start), then holds [0, end): positions
        [start, end) are ``source``'s (either id may be a slot or a cache sequence id). The engine calls it
        only when ``info.cache_slots > 0``; runtimes without a prefix cache keep this refusal."""
        raise BackendError(f"{type(self).__name__} keeps no prefix cache (RuntimeInfo.cache_slots is 0)", ENGINE_BUG_HINT)

    def move_kv(self, source: int, target: int) -> None:
        """``target``, which holds nothing, takes over all that ``source`` holds, and ``source`` is left empty:
        a renaming, never a copy (the prefix cache parks a finished slot's KV with it, and hands an entry
        back to the request that continues it). Same condition as share_kv."""
        raise BackendError(f"{type(self).__name__} keeps no prefix cache (RuntimeInfo.cache_slots is 0)", ENGINE_BUG_HINT)

    def trim(self, slot: int, tokens: int) -> None:
        """Keep only the first ``tokens`` positions of a sequence's KV (same condition as share_kv)."""
        raise BackendError(f"{type(self).__name__} keeps no prefix cache (RuntimeInfo.cache_slots is 0)", ENGINE_BUG_HINT)

    def close(self) -> None: ...

    def after_ready(self) -> None:
        """The model serves (its server answers /health): start what the runtime left off the load's path, in the
        background (llama.cpp: the attention timing). Returns at once; a failure there never reaches serving."""

    # Saved prefix state (``serve --warm``; RuntimeInfo.saves_prefix_state says a runtime has it).
    # The KV cache's element type where the runtime has several (llama.cpp); part of a saved state's identity.
    kv_type: str | None = None
    # Whether V is stored transposed (llama.cpp without flash attention): a saved state loads only where it is
    # stored the same way. None where the runtime has one layout.
    kv_v_transposed: bool | None = None

    def save_sequence(self, seq_id: int, path: Path, tokens: list[int]) -> int:
        """Write the KV of ``seq_id``, which holds exactly ``tokens``, to ``path``; returns the bytes written."""
        raise BackendError(f"{type(self).__name__} cannot save a sequence's KV (RuntimeInfo.saves_prefix_state)",
                           ENGINE_BUG_HINT)

    def load_sequence(self, seq_id: int, path: Path, max_tokens: int) -> list[int]:
        """Load a state :meth:`save_sequence` wrote into the empty ``seq_id``; returns its tokens (empty when the
        file is refused: then nothing was loaded)."""
        raise BackendError(f"{type(self).__name__} cannot load a sequence's KV (RuntimeInfo.saves_prefix_state)",
                           ENGINE_BUG_HINT)



class EmbeddingRuntime(Protocol):
    """An embedding model (no KV cache, no step): token ids in, one pooled vector per input out."""

    info: RuntimeInfo  # vocab_size, and context_length: the longest input it accepts
    tokenizer: Tokenizer
    dimensions: int  # length of every embedding vector

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Token ids of each text with the model's special tokens; longer than ``info.context_length`` is a
        ContextOverflowError unless ``truncate``."""
        ...

    def embed_ids(self, batch: list[list[int]]) -> np.ndarray:
        """(len(batch), dimensions) float32 embeddings of already tokenized inputs."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EncodedPair:
    """One (query, document) pair as a cross-encoder reads it: token ids and their token types."""

    ids: list[int]
    type_ids: list[int]

    def __len__(self) -> int:
        return len(self.ids)


class RerankRuntime(Protocol):
    """A cross-encoder (no KV cache, no step): (query, document) pairs in, one relevance score per pair out."""

    info: RuntimeInfo  # vocab_size, and context_length: the most tokens of one pair (longer pairs are cut)
    tokenizer: Tokenizer

    def encode_pairs(self, query: str, documents: list[str]) -> list[EncodedPair]:
        """Each (query, document) pair tokenized and cut to ``info.context_length`` as the original does."""
        ...

    def score_pairs(self, batch: list[EncodedPair]) -> np.ndarray:
        """(len(batch),) float32 relevance scores of already tokenized pairs, run as one padded batch."""
        ...

    def close(self) -> None: ...




def check_step_inputs(batch: list[StepInput], info: RuntimeInfo, held_tokens: Callable[[int], int],
                      allow_rewind: bool) -> None:
    """Refuse a step that contradicts the contract above: a bad or repeated slot, no tokens, a start
    position past what the slot holds (or before it, for runtimes that cannot rewind), more than the
    context, token ids outside the vocabulary. ``held_tokens(slot)`` is what the runtime holds now.
    Capacity is left to the runtime: how a rewind frees cells differs between backends."""
    if not batch:
        raise BackendError("step() with an empty batch", ENGINE_BUG_HINT)
    seen: set[int] = set()
    for item in batch:
        if not 0 <= item.slot < info.max_slots or item.slot in seen:
            raise BackendError(f"slot {item.slot} is out of range (outside 0..{info.max_slots - 1}) or repeated "
                               "in one batch", ENGINE_BUG_HINT)
        seen.add(item.slot)
        if not item.tokens:
            raise BackendError(f"slot {item.slot}: step with no tokens", ENGINE_BUG_HINT)
        if item.all_logits and not info.position_logits:
            raise BackendError(f"slot {item.slot}: logits of every position asked from a runtime that "
                               "returns only the last", ENGINE_BUG_HINT)
        held = held_tokens(item.slot)
        if item.start_pos > held:
            raise BackendError(f"slot {item.slot}: start_pos {item.start_pos} but only {held} tokens cached",
                               ENGINE_BUG_HINT)
        if item.start_pos < held and not allow_rewind:
            raise BackendError(f"slot {item.slot}: start_pos {item.start_pos} but the slot holds {held} and "
                               "this runtime cannot rewind", ENGINE_BUG_HINT)
        end = item.start_pos + len(item.tokens)
        if end > info.context_length:
            raise BackendError(f"slot {item.slot}: {end} tokens exceed the context length {info.context_length}",
                               "lower max_tokens or the prompt length")
        bad = [t for t in item.tokens if not 0 <= t < info.vocab_size]
        if bad:
            raise BackendError(f"slot {item.slot}: token ids {bad[:5]} outside 0..{info.vocab_size - 1}",
                               "the prompt was tokenized with another vocabulary")


def check_sequence_id(info: RuntimeInfo, seq_id: int) -> None:
    """A running slot or a cache sequence id (see RuntimeInfo.cache_slots); anything else is an engine bug."""
    if not 0 <= seq_id < info.max_slots + info.cache_slots:
        raise BackendError(f"sequence id {seq_id} is outside 0..{info.max_slots + info.cache_slots - 1} "
                           f"({info.max_slots} slots + {info.cache_slots} cache entries)", ENGINE_BUG_HINT)


def rows_for_step(batch: list[StepInput], decode_together: Callable[[list[StepInput]], Sequence[Row]],
                  run_alone: Callable[[StepInput], Row]) -> list[Row]:
    """The logit rows of the inputs that want logits, in batch order (``run_alone`` returns a block of
    len(tokens) rows for an input with all_logits: the caller concatenates).

    Runtimes without a unified batch (ONNX, torch CPU) still win by decoding several slots in one
    forward: inputs that decode one token on a warm slot go to ``decode_together`` in one call when
    there are at least two of them; prefills and a lone decode run one by one through ``run_alone``.
    """
    decodes = [i for i, item in enumerate(batch) if len(item.tokens) == 1 and item.start_pos > 0]
    rows: dict[int, Row] = {}
    if len(decodes) > 1:
        rows.update(zip(decodes, decode_together([batch[i] for i in decodes])))
    for index, item in enumerate(batch):
        if index not in rows:
            rows[index] = run_alone(item)
    return [rows[i] for i, item in enumerate(batch) if item.want_logits or item.all_logits]
