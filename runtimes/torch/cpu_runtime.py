"""The torch runtime behind our engine: a Hugging Face causal LM, one KV store per slot.

This is the CPU path of ``--runtime torch`` (and the reference the CUDA path is compared with). The
engine schedules; this class only runs forwards:

* prefill chunks (several tokens) run one slot at a time, on a ``DynamicCache`` built from the slot;
* single-token decodes of slots that already hold KV are grouped into one batched forward (left-padded
  caches, see :mod:`edgeopt.runtimes.torch.slot_cache`), which is where continuous batching pays off.

Contract checks (unknown slot, a start position that is not the slot's length, KV capacity or context
exceeded) raise :class:`BackendError`: they mean an engine bug, and running anyway would silently
return logits for the wrong history.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from edgeopt.errors import ENGINE_BUG_HINT, BackendError
from edgeopt.runtimes.base import Runtime, RuntimeInfo, StepInput, Tokenizer, check_step_inputs, rows_for_step
from edgeopt.runtimes.torch.slot_cache import SlotKV, append_last_token, cache_for_slot, padded_cache, read_back


class TorchRuntime(Runtime):
    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, info: RuntimeInfo) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.info = dataclasses.replace(info, position_logits=True)  # prefills can return every position
        self.device = next(model.parameters()).device
        self._slots: dict[int, SlotKV] = {}
        self.forwards = 0  # forward passes run, for batching tests and benchmarks
        self.closed = False

    @property
    def kv_used_tokens(self) -> int:
        return sum(slot.length for slot in self._slots.values())

    def step(self, batch: list[StepInput]) -> np.ndarray:
        self._check(batch)
        with torch.inference_mode():
            wanted = rows_for_step(batch, self._decode_batched, self._forward_one)
        if not wanted:
            return np.zeros((0, self.info.vocab_size), dtype=np.float32)
        rows = torch.cat([r.reshape(-1, r.shape[-1]) for r in wanted])  # all_logits inputs bring a block of rows
        return rows.float().cpu().numpy()[:, : self.info.vocab_size]

    def release(self, slot: int) -> None:
        if not 0 <= slot < self.info.max_slots:
            raise BackendError(f"release of slot {slot}: slots are 0..{self.info.max_slots - 1}",
                               ENGINE_BUG_HINT)
        self._slots.pop(slot, None)

    def close(self) -> None:
        self._slots.clear()
        self.closed = True

    # --- forwards ---------------------------------------------------------------------------------

    def _forward_one(self, item: StepInput) -> torch.Tensor:
        slot = self._slots.setdefault(item.slot, SlotKV())
        cache = cache_for_slot(slot)
        count = len(item.tokens)
        input_ids = torch.tensor([item.tokens], dtype=torch.long, device=self.device)
        positions = torch.arange(item.start_pos, item.start_pos + count, device=self.device).unsqueeze(0)
        out = self.model(input_ids=input_ids, position_ids=positions, past_key_values=cache, use_cache=True,
                         logits_to_keep=0 if item.all_logits else 1)  # 0: every position (prompt logprobs)
        self._slots[item.slot] = read_back(out.past_key_values)
        self.forwards += 1
        return out.logits[0] if item.all_logits else out.logits[0, -1]

    def _decode_batched(self, items: list[StepInput]) -> torch.Tensor:
        slots = [self._slots[item.slot] for item in items]
        cache, mask = padded_cache(slots)
        input_ids = torch.tensor([[item.tokens[0]] for item in items], dtype=torch.long, device=self.device)
        positions = torch.tensor([[item.start_pos] for item in items], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, attention_mask=mask.to(self.device), position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        append_last_token(slots, out.past_key_values)
        self.forwards += 1
        return out.logits[:, -1]

    # --- contract ----------------------------------------------------------------------------------

    def _held(self, slot: int) -> int:
        return self._slots[slot].length if slot in self._slots else 0

    def _check(self, batch: list[StepInput]) -> None:
        if self.closed:
            raise BackendError("step() after close()", ENGINE_BUG_HINT)
        check_step_inputs(batch, self.info, self._held, allow_rewind=False)
        new_tokens = sum(len(item.tokens) for item in batch)
        if self.kv_used_tokens + new_tokens > self.info.kv_capacity_tokens:
            raise BackendError(f"KV overflow: {self.kv_used_tokens} held + {new_tokens} new > capacity "
                               f"{self.info.kv_capacity_tokens}", ENGINE_BUG_HINT)
