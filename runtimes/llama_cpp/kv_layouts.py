"""llama.cpp's two KV layouts, one class each, chosen once when the runtime loads (``kv_layout``).

* :class:`UnifiedLayout` (``kv_unified = true``): ``n_ctx`` cells every sequence draws from. A sequence id
  is a tag on cells, so ``llama_memory_seq_cp`` shares cells between sequences without copying KV data
  (the engine's prefix cache then runs its shared-cells mode) and any order of a step decodes in one pass.
* :class:`StreamsLayout` (``kv_unified = false``, llama-server's layout): every sequence id, slot or cache
  entry, owns a stream of ``n_ctx / n_seq_max`` cells, so a decode query scans only its own sequence's
  cells. llama.cpp copies between streams only whole (a partial range aborts the process in
  ``llama_kv_cache::seq_cp``), so sharing copies the whole source stream and trims the copy (or, for a
  short source in host memory, copies its held cells through the state API: state_copy.py): the engine
  then runs its copied mode, as on ONNX. A step is laid out over consecutive streams
  (runtimes/llama_cpp/stream_order.py), and a new sequence takes the lowest empty stream, so that
  llama.cpp decodes it in one pass.

Both work on :class:`SequenceNames`: the engine's sequence ids are names for llama.cpp's, so ``move_kv``
renames, and parking a finished sequence in the prefix cache, and continuing it later, moves no KV data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from edgeopt.errors import ENGINE_BUG_HINT, BackendError
from edgeopt.sizing.layout import STREAMS, UNIFIED
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp.state_copy import StateCopy
from edgeopt.runtimes.llama_cpp.stream_order import PAD_TOKEN, hole_moves, lay_out, renamed


class SequenceNames:
    """Engine sequence id -> llama.cpp sequence id (in the streams layout: its stream)."""

    def __init__(self, memory: llama_cpp.llama_memory_t, count: int) -> None:
        self.memory = memory
        self.of = list(range(count))

    def swap(self, a: int, b: int) -> None:
        self.of[a], self.of[b] = self.of[b], self.of[a]

    def held(self, seq_id: int) -> int:
        return self.held_stream(self.of[seq_id])

    def held_stream(self, stream: int) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, stream)) + 1


@dataclass(frozen=True)
class Arrangement:
    """A step as llama.cpp decodes it."""

    inputs: list[StepInput]  # named by llama.cpp's sequence ids, in decode order
    padding: list[tuple[int, int]] = field(default_factory=list)  # (stream, position) cells to drop after
    row_order: np.ndarray | None = None  # puts the logits rows back in the step's order (None: already)


class UnifiedLayout:
    kv_unified = True  # llama_context_params.kv_unified
    shares_cells = True  # RuntimeInfo.shares_kv_cells
    splits_mixed_lengths = False  # RuntimeInfo.splits_mixed_lengths
    streams_moved = 0

    def __init__(self, names: SequenceNames, max_slots: int, stream_cells: int,
                 state_copy: StateCopy | None = None) -> None:
        self.names = names  # the other arguments: only the streams layout has a use for them

    def arrange(self, batch: list[StepInput], max_batch_tokens: int) -> Arrangement:
        return Arrangement(renamed(batch, self.names.of))  # one pool: any order decodes in one pass

    def decoded(self, arrangement: Arrangement) -> None:
        return None

    def share(self, source: int, target: int, start: int, end: int) -> None:
        """Adds the target's tag to the source's cells, copies no KV data."""
        llama_cpp.llama_memory_seq_cp(self.names.memory, self.names.of[source], self.names.of[target], start, end)

    def settle(self, seq_id: int, held: int, decode: Callable[[list[StepInput]], object]) -> None:
        return None  # nothing is ever pending


class StreamsLayout:
    kv_unified = False
    shares_cells = False
    splits_mixed_lengths = True  # one pass carries the same number of tokens of every stream in it

    def __init__(self, names: SequenceNames, max_slots: int, stream_cells: int,
                 state_copy: StateCopy | None = None) -> None:
        self.names = names
        self.max_slots = max_slots
        self.stream_cells = stream_cells  # llama.cpp's n_ctx_seq
        self.state_copy = state_copy  # None: KV off the host, every copy is llama.cpp's whole-stream one
        self.pending_copies: set[int] = set()  # copy targets whose data llama.cpp moves at the next decode
        self.streams_moved = 0  # cached prefixes moved out of the running sequences' way (diagnostics)

    def arrange(self, batch: list[StepInput], max_batch_tokens: int) -> Arrangement:
        self._place_new_sequences(batch)
        self._move_long_holes_out(batch)
        laid = lay_out(batch, self.names.of, self.names.held_stream, self.stream_cells, max_batch_tokens)
        return Arrangement(laid.inputs, laid.padding, laid.row_order)

    def decoded(self, arrangement: Arrangement) -> None:
        self.pending_copies.clear()  # llama.cpp moved them before computing the batch
        for stream, position in arrangement.padding:
            llama_cpp.llama_memory_seq_rm(self.names.memory, stream, position, -1)

    def share(self, source: int, target: int, start: int, end: int) -> None:
        if start == 0 and target < self.max_slots:  # a new running sequence: on a low stream
            self._claim_low_stream(target, set())
        self._copy_stream(source, target, end)

    def settle(self, seq_id: int, held: int, decode: Callable[[list[StepInput]], object]) -> None:
        """A state save reads the stream as it is, and llama.cpp has no call that moves pending stream
        copies but llama_decode: decode one throwaway token after ``seq_id``'s positions, then drop it."""
        if self.names.of[seq_id] not in self.pending_copies:
            return
        decode([StepInput(seq_id, [PAD_TOKEN], held, False)])
        llama_cpp.llama_memory_seq_rm(self.names.memory, self.names.of[seq_id], held, -1)

    def _place_new_sequences(self, batch: list[StepInput]) -> None:
        """A sequence starting at position 0 holds nothing yet: give it a low stream (_claim_low_stream)."""
        of = self.names.of
        in_batch = {of[item.slot] for item in batch}
        for item in batch:
            if item.start_pos == 0:
                in_batch.discard(of[item.slot])
                in_batch.add(self._claim_low_stream(item.slot, in_batch))

    def _claim_low_stream(self, slot: int, busy: set[int]) -> int:
        """Give the empty sequence ``slot`` a stream next to the running sequences' (and ``busy``) streams, so
        that no cached prefix sits between them: such a hole would pad every running stream's attention to
        its length (stream_order.hole_moves). Usually the lowest empty stream; when that would leave cached
        prefixes in the way, the stream of one of them instead, moved first to the highest empty stream: one
        whole-stream copy, made at the next decode before its batch is computed, which the new sequence's
        first token waits for, so it is made only when it leaves fewer holes. Returns the slot's stream."""
        of = self.names.of
        mine = of[slot]
        # held == 0 means empty: a pending copy's target has its cells tagged as soon as the copy is asked for.
        held = [self.names.held_stream(s) for s in range(len(of))]
        running = set(busy) | {of[s] for s in range(self.max_slots) if held[of[s]]}
        running.discard(mine)
        empty = next(s for s in range(len(held)) if s == mine or (s not in running and held[s] == 0))
        cached = [s for s in range(len(held)) if held[s] and s not in running]

        def holes(stream: int) -> int:  # cached prefixes left between the running streams if we take `stream`
            block = running | {stream}
            return sum(1 for s in cached if s != stream and min(block) < s < max(block))

        best = min([empty, *cached], key=lambda s: (holes(s), s != empty, s)) if running else empty
        if held[best]:  # a cached prefix: move it up out of the way
            self._move_stream(best, max(s for s in range(len(held)) if s not in running and held[s] == 0))
        if best != mine:
            self.names.swap(slot, of.index(best))
        return best

    def _move_stream(self, source: int, target: int) -> None:
        """Move a stream's KV into the empty ``target`` stream; its sequence id goes with it."""
        llama_cpp.llama_memory_seq_cp(self.names.memory, source, target, -1, -1)
        llama_cpp.llama_memory_seq_rm(self.names.memory, source, -1, -1)
        self.pending_copies.add(target)
        self.names.swap(self.names.of.index(source), self.names.of.index(target))
        self.streams_moved += 1

    def _move_long_holes_out(self, batch: list[StepInput]) -> None:
        """Move each long cached prefix sitting between the step's streams to an empty stream outside them
        (stream_order.hole_moves)."""
        for hole, empty in hole_moves(batch, self.names.of, self.names.held_stream, len(self.names.of)):
            self._move_stream(hole, empty)

    def _copy_stream(self, source: int, target: int, end: int) -> None:
        """The target becomes the source's first ``end`` positions: the source's KV copied whole, then trimmed.
        The target's ``start`` positions it already held are the source's own (the engine extends a cache
        entry only with the sequence it came from), so replacing them changes nothing. A short source is
        copied at once through the state API (_copies_by_state); otherwise llama.cpp copies the whole stream
        (p0 = p1 = -1; any other range is a GGML_ASSERT abort) and moves the data at the next llama_decode,
        before that batch is computed."""
        out_of, into = self.names.of[source], self.names.of[target]
        if not self._copies_by_state(out_of, into):
            llama_cpp.llama_memory_seq_cp(self.names.memory, out_of, into, -1, -1)
            self.pending_copies.add(into)
        if not llama_cpp.llama_memory_seq_rm(self.names.memory, into, end, -1):
            raise BackendError(f"llama.cpp refused to trim the copy of sequence {source} in {target} to {end} "
                               "positions", ENGINE_BUG_HINT)

    def _copies_by_state(self, source: int, target: int) -> bool:
        """Copy through the state API (state_copy.py) when the source holds at most half a stream and no
        whole-stream copy is pending: one would still read or overwrite these streams at the next decode,
        after a state copy that happens now."""
        return (self.state_copy is not None and not self.pending_copies
                and 2 * self.names.held_stream(source) <= self.stream_cells
                and self.state_copy.copy(source, target))


KV_LAYOUT_CLASSES: dict[str, type[UnifiedLayout] | type[StreamsLayout]] = {UNIFIED: UnifiedLayout,
                                                                           STREAMS: StreamsLayout}
