"""A format's memory model: what its runtime holds beside the model file, for the plan and the serving budget
(edgeopt.sizing.budget and .resident add these up; the formats' own modules say how each figure was measured)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MemoryModel:
    kv_element_bytes: float  # bytes of one cached K or V element at the runtime's default KV type
    runtime_overhead_bytes: int  # the runtime's fixed cost beside weights and KV: code, buffers, slack
    # Quants whose KV is kept in another dtype than the default (torch keeps KV in the checkpoint's dtype).
    kv_element_bytes_by_quant: Mapping[str, float] = field(default_factory=dict)
    # Of runtime_overhead_bytes, the Python server process itself (interpreter, numpy, FastAPI, the runtime's
    # library): what `edgeopt plan` shows as "process" beside the runtime's buffers (edgeopt.sizing.resident).
    process_bytes: int = 0
    # The runtime's memory that grows with the model, beside runtime_overhead_bytes (0: the fixed cost covers it).
    overhead_per_vocab_entry: int = 0  # the runtime's own tables of the vocabulary
    # Its compute buffer, per unit of the feed-forward width and per token of the runtime's batch (ServingSpec).
    overhead_per_ffn_unit_per_batch_token: int = 0
    logits_rows_per_sequence: int = 0  # f32 rows of vocabulary width it reserves per sequence
    # A runtime that holds its KV cache more than once at a step's peak (ONNX Runtime): resident bytes per KV
    # cell in units of the cell's own bytes, and the longest sequence's KV held that many times more while its
    # prompt is prefilled.
    kv_resident_copies: float = 1.0
    prompt_kv_copies: float = 0.0
    # "module:function": (weights_bytes, vocab_size, hidden_size, tied_embeddings) -> bytes the runtime builds from
    # the file beyond the file's own; "" when it maps the file as it is (llama.cpp).
    weights_extra: str = ""
    # "module:function": (hidden_size, heads, intermediate_size, input_tokens) -> bytes one run of the largest batch
    # an embedding server makes allocates; "" when the fixed overhead covers it.
    embedding_run: str = ""

    def kv_element_bytes_for(self, quant: str) -> float:
        return self.kv_element_bytes_by_quant.get(quant, self.kv_element_bytes)

    def overhead_bytes(self, vocab_size: int, intermediate_size: int, batch_tokens: int) -> int:
        """The runtime's memory beside weights, KV and the sequences' logits rows, for one model."""
        return (self.runtime_overhead_bytes + vocab_size * self.overhead_per_vocab_entry
                + intermediate_size * self.overhead_per_ffn_unit_per_batch_token * batch_tokens)

    def logits_bytes_per_sequence(self, vocab_size: int) -> int:
        return self.logits_rows_per_sequence * vocab_size * 4
