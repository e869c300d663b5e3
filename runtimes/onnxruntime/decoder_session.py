"""One forward pass of an exported decoder (optimum layout) on numpy arrays.

optimum exports a causal LM with KV cache as one graph: inputs ``input_ids``, ``attention_mask``
(over past + new tokens), ``position_ids`` and ``past_key_values.{i}.key/value`` shaped
(batch, kv_heads, past_len, head_dim); outputs ``logits`` and ``present.{i}.key/value`` holding past
+ new. Everything the runtime, the exporter's validation and the scorer need sits here, read from
the session's own input metadata rather than from a config file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.errors import BackendError
from edgeopt.sizing.budget import kv_bytes_per_token, kv_elements_per_token

KV = list[np.ndarray]  # [key_0, value_0, key_1, value_1, ...], each (batch, kv_heads, length, head_dim)


@dataclass(frozen=True)
class DecoderLayout:
    num_layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: type
    has_position_ids: bool
    kv_input_names: tuple[str, ...]
    kv_output_names: tuple[str, ...]

    @property
    def kv_elements_per_token(self) -> int:
        return kv_elements_per_token(self.num_layers, self.kv_heads, self.head_dim)

    @property
    def kv_bytes_per_token(self) -> int:
        """As the exported graph keeps its past_key_values (the exporter records it in the manifest)."""
        return kv_bytes_per_token(self.kv_elements_per_token, np.dtype(self.kv_dtype).itemsize)


def read_layout(session: Any) -> DecoderLayout:
    inputs = {i.name: i for i in session.get_inputs()}
    if "input_ids" not in inputs or "past_key_values.0.key" not in inputs:
        raise BackendError(f"the ONNX model has inputs {sorted(inputs)}, not a decoder with KV cache",
                           "export with edgeopt optimize --format onnx (task text-generation-with-past)")
    layers = sum(1 for name in inputs if name.startswith("past_key_values.") and name.endswith(".key"))
    first = inputs["past_key_values.0.key"]
    kv_heads, head_dim = first.shape[1], first.shape[3]
    if not isinstance(kv_heads, int) or not isinstance(head_dim, int):
        raise BackendError(f"KV input shape {first.shape} has symbolic heads/head_dim", "re-export the model")
    dtype = np.float16 if "float16" in first.type else np.float32
    kv_in = tuple(f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value"))
    kv_out = tuple(f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value"))
    return DecoderLayout(layers, kv_heads, head_dim, dtype, "position_ids" in inputs, kv_in, kv_out)


class DecoderSession:
    """Runs the graph; callers own the KV arrays between calls."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.layout = read_layout(session)
        self._outputs = ["logits", *self.layout.kv_output_names]
        self.vocab_size = int(session.get_outputs()[0].shape[-1])

    def empty_kv(self, batch: int = 1) -> KV:
        shape = (batch, self.layout.kv_heads, 0, self.layout.head_dim)
        return [np.zeros(shape, dtype=self.layout.kv_dtype) for _ in self.layout.kv_input_names]

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray, position_ids: np.ndarray,
            past: KV) -> tuple[np.ndarray, KV]:
        """input_ids/position_ids (B, T) int64, attention_mask (B, past + T) int64 -> (logits (B, T, V), present)."""
        feed: dict[str, np.ndarray] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.layout.has_position_ids:
            feed["position_ids"] = position_ids
        feed.update(zip(self.layout.kv_input_names, past))
        try:
            outputs = self.session.run(self._outputs, feed)
        except Exception as exc:  # onnxruntime's errors are not a public hierarchy
            raise BackendError(f"onnxruntime step failed for batch {input_ids.shape}: {exc}",
                               "this is a bug in the bundle or edgeopt; re-export and report it") from exc
        return outputs[0], outputs[1:]

    def run_sequence(self, token_ids: list[int], past: KV | None = None, start_pos: int = 0) -> tuple[np.ndarray, KV]:
        """One sequence (batch 1) continuing from ``past`` of length ``start_pos``."""
        past = past if past is not None else self.empty_kv()
        n = len(token_ids)
        ids = np.asarray([token_ids], dtype=np.int64)
        mask = np.ones((1, start_pos + n), dtype=np.int64)
        pos = np.arange(start_pos, start_pos + n, dtype=np.int64)[None, :]
        logits, present = self.run(ids, mask, pos, past)
        return logits[0], present

    def logits_for(self, token_ids: list[int], chunk: int = 512) -> np.ndarray:
        """Logits at every position of one sequence, in chunks of at most ``chunk`` tokens."""
        rows, past, pos = [], None, 0
        for start in range(0, len(token_ids), chunk):
            part = token_ids[start:start + chunk]
            logits, past = self.run_sequence(part, past, pos)
            rows.append(logits.astype(np.float32, copy=False))
            pos += len(part)
        return np.concatenate(rows, axis=0)
