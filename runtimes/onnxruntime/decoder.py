"""The ONNX Runtime backend for the engine: one KV cache per slot, held as numpy arrays.

Decode steps (one new token per sequence) of every slot are run as *one* batch: each slot's past is
left-padded to the longest past, the padding masked out by ``attention_mask``, and each row given its
true ``position_ids``, so the result equals running the slots one by one. That batch stays together
as a DecodeGroup while the same slots keep decoding, so steady-state steps feed the graph's
``present`` outputs straight back without copying KV in Python. Prefill chunks, whose lengths
differ, run one sequence at a time (padding them would waste more compute than batching saves).

Prefix cache: cache sequence ids hold KV arrays like slots. The arrays are never written in place (every
step makes new ones), so handing a whole sequence over shares them; a part of one is copied.
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import ENGINE_BUG_HINT, BackendError
from edgeopt.runtimes.base import Runtime, RuntimeInfo, StepInput, check_sequence_id, check_step_inputs, rows_for_step
from edgeopt.runtimes.onnxruntime.decode_group import DecodeGroup, advance, form_group, step_inputs
from edgeopt.runtimes.onnxruntime.decoder_session import KV, DecoderSession
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer


class OnnxDecoderRuntime(Runtime):
    """edgeopt.runtimes.base.Runtime over a DecoderSession."""

    def __init__(self, decoder: DecoderSession, tokenizer: BundleTokenizer, info: RuntimeInfo) -> None:
        self.decoder = decoder
        self.tokenizer = tokenizer
        self.info = info
        self._kv: dict[int, KV] = {}  # slot -> [k0, v0, k1, v1, ...], each (1, heads, length, dim)
        self._group: DecodeGroup | None = None  # slots decoding together; their KV lives here, not in _kv

    # --- Runtime protocol ------------------------------------------------------------------

    def step(self, batch: list[StepInput]) -> np.ndarray:
        self._check(batch)
        wanted = rows_for_step(batch, self._decode_batch, self._run_one)
        if not wanted:
            return np.zeros((0, self.info.vocab_size), dtype=np.float32)
        return np.concatenate([rows.reshape(-1, rows.shape[-1]) for rows in wanted]).astype(np.float32, copy=False)

    def release(self, slot: int) -> None:
        check_sequence_id(self.info, slot)
        self._leave_group(slot)
        self._kv.pop(slot, None)

    def move_kv(self, source: int, target: int) -> None:
        check_sequence_id(self.info, source)
        check_sequence_id(self.info, target)
        if source == target or self.cached_tokens(target) != 0:
            raise BackendError(f"move_kv({source} -> {target}): the target holds {self.cached_tokens(target)} positions",
                               ENGINE_BUG_HINT)
        self._leave_group(source)
        self._leave_group(target)
        kv = self._kv.pop(source, None)
        if kv is not None:
            self._kv[target] = kv

    def share_kv(self, source: int, target: int, start: int, end: int) -> None:
        check_sequence_id(self.info, source)
        check_sequence_id(self.info, target)
        held, into = self.cached_tokens(source), self.cached_tokens(target)
        if source == target or into != start or not 0 <= start < end <= held:
            raise BackendError(f"share_kv({source} -> {target}, positions [{start}, {end})): the source holds {held} "
                               f"positions and the target {into}", ENGINE_BUG_HINT)
        self._leave_group(source)
        self._leave_group(target)
        kv = self._kv[source]
        if start == 0 and end == held:
            self._kv[target] = kv  # immutable arrays: the whole sequence is shared, not copied
        elif start == 0:
            self._kv[target] = [np.ascontiguousarray(a[:, :, :end]) for a in kv]
        else:
            self._kv[target] = [np.concatenate([mine, a[:, :, start:end]], axis=2)
                                for mine, a in zip(self._kv[target], kv)]

    def trim(self, slot: int, tokens: int) -> None:
        check_sequence_id(self.info, slot)
        if not 0 < tokens <= self.cached_tokens(slot):
            raise BackendError(f"trim({slot}, {tokens}) of a sequence holding {self.cached_tokens(slot)} positions",
                               ENGINE_BUG_HINT)
        self._leave_group(slot)
        self._kv[slot] = [np.ascontiguousarray(a[:, :, :tokens]) for a in self._kv[slot]]

    def close(self) -> None:
        self._kv.clear()
        self._group = None
        self.decoder = None  # type: ignore[assignment]  # drops the session and its memory

    # --- internals -------------------------------------------------------------------------

    def cached_tokens(self, slot: int) -> int:
        if self._group is not None and slot in self._group.slots:
            return self._group.lengths[self._group.slots.index(slot)]
        kv = self._kv.get(slot)
        return 0 if kv is None else int(kv[0].shape[2])

    def _check(self, batch: list[StepInput]) -> None:
        """Reject inputs that contradict the KV this runtime holds (engine bugs, not user errors)."""
        check_step_inputs(batch, self.info, self.cached_tokens, allow_rewind=True)
        seen = {inp.slot for inp in batch}
        held = set(self._kv) | set(self._group.slots if self._group is not None else ())
        after = sum(self.cached_tokens(s) for s in held if s not in seen)
        after += sum(inp.start_pos + len(inp.tokens) for inp in batch)
        if after > self.info.kv_capacity_tokens:
            raise BackendError(f"step would hold {after} KV tokens, above the capacity {self.info.kv_capacity_tokens}",
                               ENGINE_BUG_HINT)

    def _past(self, inp: StepInput) -> KV:
        """The slot's KV truncated to start_pos (a recomputed or rewound sequence drops the rest)."""
        kv = self._kv.get(inp.slot)
        if kv is None or inp.start_pos == 0:
            return self.decoder.empty_kv()
        if kv[0].shape[2] == inp.start_pos:
            return kv
        return [np.ascontiguousarray(a[:, :, :inp.start_pos]) for a in kv]

    def _run_one(self, inp: StepInput) -> np.ndarray:
        self._leave_group(inp.slot)
        logits, present = self.decoder.run_sequence(inp.tokens, self._past(inp), inp.start_pos)
        self._kv[inp.slot] = present
        return logits if inp.all_logits else logits[-1]  # the graph computes every position's logits anyway

    def _leave_group(self, slot: int) -> None:
        """Split the decode group back into per-slot KV if it holds this slot."""
        group = self._group
        if group is None or slot not in group.slots:
            return
        for row, member in enumerate(group.slots):
            self._kv[member] = group.row_kv(row)
        self._group = None

    def _decode_batch(self, inputs: list[StepInput]) -> np.ndarray:
        slots = tuple(inp.slot for inp in inputs)
        starts = [inp.start_pos for inp in inputs]
        group = self._group
        if group is None or not group.continues(slots, starts):
            for slot in slots:
                self._leave_group(slot)
            if self._group is not None:  # an unrelated group (none of these slots): split it too
                self._leave_group(self._group.slots[0])
            pasts = [self._past(inp) for inp in inputs]
            for slot in slots:
                self._kv.pop(slot, None)  # from now on the group owns these slots' KV
            group = self._group = form_group(slots, pasts, starts, self.decoder.layout)
        ids, mask, pos = step_inputs(group, [inp.tokens[0] for inp in inputs])
        logits, present = self.decoder.run(ids, mask, pos, group.kv)
        advance(group, present, mask)
        return logits[:, -1]
