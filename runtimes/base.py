"""The contract between the serving engine and an inference backend.

The engine owns scheduling, sampling and KV *accounting*; a runtime owns the model and the KV
*storage*. Each running sequence is bound to a ``slot`` (llama.cpp's sequence id) for its lifetime.
Everything crossing this boundary is plain ints, lists and numpy arrays, so the engine never imports
torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class StepInput:
    """One sequence's share of a batched forward pass."""

    slot: int  # KV slot owned by the sequence; 0 <= slot < RuntimeInfo.max_slots
    tokens: list[int]  # new tokens: a prefill chunk, or the single token sampled last step
    start_pos: int  # position of tokens[0]; the slot's KV holds exactly positions [0, start_pos)
    want_logits: bool  # return next-token logits after the last of ``tokens``


@dataclass(frozen=True)
class RuntimeInfo:
    vocab_size: int
    kv_capacity_tokens: int  # KV cells shared by all slots
    max_slots: int  # concurrent sequences the backend can hold
    context_length: int  # longest single sequence the model supports here
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    bos_token_id: int | None = None
    add_bos: bool = False


class Tokenizer(Protocol):
    """Byte-exact tokenizer view: text in, ids out; ids back to raw bytes for streaming."""

    def encode(self, text: str, add_special: bool = True) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of one token (may be a partial UTF-8 sequence); b"" for control tokens."""
        ...


class Runtime(Protocol):
    info: RuntimeInfo
    tokenizer: Tokenizer

    def step(self, batch: list[StepInput]) -> np.ndarray:
        """Run one forward pass over every input; return float32 logits of shape
        (number of inputs with want_logits, vocab_size), in batch order."""
        ...

    def release(self, slot: int) -> None:
        """Forget the slot's KV (finished, aborted or preempted sequence)."""
        ...

    def close(self) -> None: ...
