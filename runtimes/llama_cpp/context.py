"""The llama.cpp runtime: one context, one KV cache, one sequence id per engine slot.

``n_ctx`` is the engine's KV capacity. Each engine step is ONE ``llama_decode`` whose batch carries every
scheduled token of every sequence, with logits requested only where the engine will sample.

Prefix cache: sequence ids ``max_slots ..`` hold cached prefixes. How the cells are laid out (one unified
pool whose cells sequences share by tag, or a stream per sequence id whose shares are copies) is a
strategy chosen once at load (runtimes/llama_cpp/kv_layouts.py); this class drives llama.cpp the same way
in both, and ``llama_memory_seq_rm`` frees a cell once no sequence tags it (``trim``).

The engine's sequence ids are names for llama.cpp's (``kv_layouts.SequenceNames``): ``move_kv`` renames,
so parking a finished sequence in the prefix cache, and continuing it later, moves no KV data.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np
import numpy.ctypeslib  # numpy loads it lazily: here, at start, not inside the first step

from edgeopt.errors import ENGINE_BUG_HINT, BackendError
from edgeopt.sizing.layout import UNIFIED
from edgeopt.runtimes.base import Runtime, RuntimeInfo, StepInput, check_sequence_id
from edgeopt.runtimes.llama_cpp.batch import NumpyBatch, split_by_outputs
from edgeopt.runtimes.llama_cpp.context_params import ContextShape, create_context
from edgeopt.runtimes.llama_cpp.kv_layouts import KV_LAYOUT_CLASSES, SequenceNames
from edgeopt.runtimes.llama_cpp.load_hooks import LoadHooks
from edgeopt.runtimes.llama_cpp.model import ModelFacts
from edgeopt.runtimes.llama_cpp.state_copy import StateCopy
from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor
from edgeopt.runtimes.llama_cpp.tokenizer import LlamaCppTokenizer

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.matmul_inputs import MatmulInputTap

# llama_decode return codes (llama.h): 1 = no KV slot for the batch, 2 = aborted, -1 = invalid input.
_DECODE_ERRORS = {1: "no free KV cells for the batch", 2: "decode aborted", -1: "invalid batch",
                  -2: "failed to allocate compute buffers", -3: "compute failed"}


class LlamaCppRuntime(LoadHooks, Runtime):
    def __init__(self, model: llama_cpp.llama_model_p, facts: ModelFacts, kv_capacity_tokens: int,
                 max_slots: int, max_batch_tokens: int, n_threads: int, context_length: int | None = None,
                 adaptive_threads: bool = False, kv_type: str = "f16", cache_slots: int = 0,
                 kv_layout: str = UNIFIED, file_key: Hashable | None = None, draft_rows: int = 0,
                 flash_attention: bool | None = None, kv_on_host: bool = False,
                 matmul_tap: MatmulInputTap | None = None) -> None:
        """``file_key``: the GGUF's identity (edgeopt.store.file_stamp), so that loading the same file again reuses
        its vocabulary scan. ``flash_attention``: flash (True) or plain (False) attention, None: llama.cpp's
        choice (runtimes/llama_cpp/attention.py decides). ``draft_rows``: logits rows a speculative step may
        need beyond one per running sequence (the longest draft); the cached prefixes' rows, never decoded,
        count towards them. ``kv_on_host``: no layer is offloaded (to a GPU or an RPC worker), so the KV
        cache is in this process's memory and short copies between streams may go through it. ``matmul_tap``:
        shown every weight matmul's input while decoding (the importance matrix of text the model writes,
        exporters/gguf/calibration.py)."""
        self._tap = matmul_tap
        self.pass_cost_key = (None if file_key is None else
                              (file_key, n_threads, kv_type, kv_layout, flash_attention, max_batch_tokens, max_slots))
        self._model = model
        self.facts = facts
        self.kv_type = kv_type  # the KV cache's element type (edgeopt.sizing.kv_types); part of any saved state's identity
        self.kv_layout = kv_layout  # edgeopt.sizing.layout's name of the strategy below
        self.flash_attention = flash_attention  # None: llama.cpp's choice
        layout_class = KV_LAYOUT_CLASSES[kv_layout]
        # llama.cpp reserves a logits row per sequence id at least; a verification pass needs one per token.
        self._max_outputs = max_slots + max(cache_slots, draft_rows)  # the context's n_outputs_max
        self._ctx = create_context(model, ContextShape(kv_capacity_tokens, max_slots, cache_slots, self._max_outputs,
                                                      max_batch_tokens, layout_class.kv_unified),
                                   n_threads, kv_type, flash_attention, matmul_tap.callback if matmul_tap else None)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        vocab = llama_cpp.llama_model_get_vocab(model)
        self.tokenizer = LlamaCppTokenizer(vocab, file_key)
        n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))  # llama.cpp rounds n_ctx up to a multiple of 256
        n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(self._ctx))  # = n_ctx when unified, one stream's cells if not
        # Engine sequence id -> llama.cpp sequence id (= its stream when not unified); move_kv swaps entries.
        self._names = SequenceNames(self._memory, max_slots + cache_slots)
        self._state_copy = StateCopy(self._ctx) if kv_on_host else None
        self._layout = layout_class(self._names, max_slots, n_ctx_seq, self._state_copy)
        bos = int(llama_cpp.llama_vocab_bos(vocab))
        self.info = RuntimeInfo(
            # The capacity we were given, not llama.cpp's rounded-up n_ctx, so the memory budget holds.
            vocab_size=self.tokenizer.vocab_size, kv_capacity_tokens=min(kv_capacity_tokens, n_ctx),
            max_slots=max_slots,
            context_length=min(context_length or facts.context_train, n_ctx_seq),
            eos_token_ids=self.tokenizer.eog_token_ids(), bos_token_id=bos if bos >= 0 else None,
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)), cache_slots=cache_slots,
            shares_kv_cells=self._layout.shares_cells,
            saves_prefix_state=cache_slots > 0, position_logits=True, trims_kv=True,
            splits_mixed_lengths=self._layout.splits_mixed_lengths,
        )
        self.max_logit_rows: int | None = self._max_outputs
        self._logits_address: int | None = None  # where the view of llama.cpp's logits buffer points
        self._logits = np.zeros((0, self.info.vocab_size), dtype=np.float32)
        self.max_batch_tokens: int = int(llama_cpp.llama_n_batch(self._ctx))  # fixed batch buffer (n_batch)
        self._batch = NumpyBatch(self.max_batch_tokens)
        self._lock = threading.Lock()  # step/release/close come from the engine thread; close may not
        # n_threads is then the most threads; the governor lowers it while other processes use our cores.
        self._governor = ThreadGovernor(self._set_threads, n_threads) if adaptive_threads else None
        self.decode_calls = 0

    @property
    def kv_v_transposed(self) -> bool:
        """Plain attention stores V transposed. None counts as flash: llama.cpp's auto takes it wherever the
        backend has the kernel (a saved state it cannot read is refused by llama.cpp all the same)."""
        return self.flash_attention is False

    def step(self, batch: list[StepInput]) -> np.ndarray:
        with self._lock:
            # Prompt logprobs (all_logits) may ask for more rows than n_outputs_max: decoded in pieces.
            rows = [self._logit_rows(*self._decode(part)) for part in split_by_outputs(batch, self._max_outputs)]
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def _logit_rows(self, outputs: int, row_order: np.ndarray | None) -> np.ndarray:
        if outputs == 0:
            return np.zeros((0, self.info.vocab_size), dtype=np.float32)
        # Rows come back in decode order of the tokens that asked for logits; copy out of llama.cpp's
        # buffer, which the next decode overwrites (fancy indexing copies too).
        rows = self._logits_view()[:outputs]
        return rows.copy() if row_order is None else rows[row_order]

    def _logits_view(self) -> np.ndarray:
        """llama.cpp's logits buffer as an array of n_outputs_max rows. Remade only when llama.cpp moved the
        buffer: making it costs more than the copy on a decode step, whose Python runs with caches the
        forward pass just flushed."""
        pointer = llama_cpp.llama_get_logits(self._ctx)
        address = ctypes.addressof(pointer.contents)
        if address != self._logits_address:
            self._logits = np.ctypeslib.as_array(pointer, shape=(self._max_outputs, self.info.vocab_size))
            self._logits_address = address
        return self._logits

    def decode_only(self, batch: list[StepInput]) -> None:
        """One ``llama_decode`` over ``batch``, waited for, with no logits copied out: llama.cpp's raw batched
        speed, which ``edgeopt.runtimes.llama_cpp.bench`` measures our engine against."""
        with self._lock:
            self._decode(batch)
            llama_cpp.llama_synchronize(self._ctx)  # GPU backends return early; count the work, not the launch

    def _decode(self, batch: list[StepInput]) -> tuple[int, np.ndarray | None]:
        """Fill the batch and decode it (the lock held); returns how many logits rows llama.cpp produced
        and the order that puts them back in ``batch``'s (None: already in it)."""
        total = sum(len(item.tokens) for item in batch)
        if not 0 < total <= self.max_batch_tokens:
            raise BackendError(f"a step of {total} tokens does not fit llama.cpp's batch of {self.max_batch_tokens}",
                               "the engine's step_token_budget must not exceed the runtime's max_batch_tokens")
        self._check_open()
        if self._governor is not None:
            self._governor.before_decode()
        arrangement = self._layout.arrange(batch, self.max_batch_tokens)
        outputs = self._batch.fill(arrangement.inputs)
        if self._tap is not None:
            self._tap.new_graph()
        code = llama_cpp.llama_decode(self._ctx, self._batch.struct)
        if self._tap is not None and self._tap.error is not None:
            raise self._tap.error
        self.decode_calls += 1
        self._layout.decoded(arrangement)
        if code != 0:
            raise BackendError(f"llama_decode failed with code {code} ({_DECODE_ERRORS.get(code, 'unknown')}) "
                               f"on a batch of {total} tokens over {len(batch)} sequences: the engine's KV "
                               "accounting and llama.cpp's disagree", ENGINE_BUG_HINT)
        return outputs, arrangement.row_order

    @property
    def threads(self) -> int:
        """Threads llama.cpp decodes with now."""
        return int(llama_cpp.llama_n_threads(self._ctx))

    def _set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self._ctx, n, n)

    def release(self, slot: int) -> None:
        check_sequence_id(self.info, slot)
        with self._lock:
            self._check_open()
            llama_cpp.llama_memory_seq_rm(self._memory, self._names.of[slot], -1, -1)

    def move_kv(self, source: int, target: int) -> None:
        check_sequence_id(self.info, source)
        check_sequence_id(self.info, target)
        with self._lock:
            self._check_open()
            if source == target or self._held(target) != 0:
                raise BackendError(f"move_kv({source} -> {target}): the target holds {self._held(target)} positions",
                                   ENGINE_BUG_HINT)
            self._names.swap(source, target)

    def share_kv(self, source: int, target: int, start: int, end: int) -> None:
        check_sequence_id(self.info, source)
        check_sequence_id(self.info, target)
        with self._lock:
            self._check_open()
            held, into = self._held(source), self._held(target)
            if source == target or into != start or not 0 <= start < end <= held:
                raise BackendError(f"share_kv({source} -> {target}, positions [{start}, {end})): the source holds "
                                   f"{held} positions and the target {into}", ENGINE_BUG_HINT)
            self._layout.share(source, target, start, end)

    def trim(self, slot: int, tokens: int) -> None:
        check_sequence_id(self.info, slot)
        with self._lock:
            self._check_open()
            if not 0 < tokens <= self._held(slot):
                raise BackendError(f"trim({slot}, {tokens}) of a sequence holding {self._held(slot)} tokens",
                                   ENGINE_BUG_HINT)
            if not llama_cpp.llama_memory_seq_rm(self._memory, self._names.of[slot], tokens, -1):
                raise BackendError(f"llama.cpp refused to trim sequence {slot} to {tokens} tokens",
                                   ENGINE_BUG_HINT)

    def save_sequence(self, seq_id: int, path: Path, tokens: list[int]) -> int:
        """Write the sequence's KV (llama_state_seq_save_file, with its tokens) to ``path``; returns bytes."""
        check_sequence_id(self.info, seq_id)
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        with self._lock:
            self._check_open()
            if self._held(seq_id) != len(tokens):
                raise BackendError(f"sequence {seq_id} holds {self._held(seq_id)} positions, not the "
                                   f"{len(tokens)} tokens to save", ENGINE_BUG_HINT)
            self._layout.settle(seq_id, len(tokens), self._decode)  # a pending stream copy is made first
            written = llama_cpp.llama_state_seq_save_file(self._ctx, str(path).encode(), self._names.of[seq_id], array,
                                                          len(tokens))
        if written == 0:
            raise BackendError(f"llama.cpp could not save sequence {seq_id} to {path}",
                               "check that the directory is writable")
        return int(written)

    def load_sequence(self, seq_id: int, path: Path, max_tokens: int) -> list[int]:
        """Load a state saved by :meth:`save_sequence` into the empty sequence ``seq_id``; returns its tokens
        (empty when llama.cpp refuses the file: then nothing was loaded)."""
        check_sequence_id(self.info, seq_id)
        tokens = (llama_cpp.llama_token * max_tokens)()
        count = ctypes.c_size_t(0)
        with self._lock:
            self._check_open()
            if self._held(seq_id) != 0:
                raise BackendError(f"sequence {seq_id} is not empty", ENGINE_BUG_HINT)
            read = llama_cpp.llama_state_seq_load_file(self._ctx, str(path).encode(), self._names.of[seq_id], tokens,
                                                       max_tokens, ctypes.byref(count))
            if read == 0:
                llama_cpp.llama_memory_seq_rm(self._memory, self._names.of[seq_id], -1, -1)
                return []
        return list(tokens[:count.value])

    def held_tokens(self, seq_id: int) -> int:
        """Positions a sequence id holds (max position + 1): for tests and diagnostics."""
        with self._lock:
            self._check_open()
            return self._held(seq_id)

    def stream_of(self, seq_id: int) -> int:
        """The llama.cpp sequence id (in the streams layout: the stream) ``seq_id`` lives in now: for tests
        and diagnostics."""
        check_sequence_id(self.info, seq_id)
        return self._names.of[seq_id]

    @property
    def streams_moved(self) -> int:
        """Cached prefixes the streams layout moved out of the running sequences' way (diagnostics)."""
        return self._layout.streams_moved

    @property
    def streams_copied_by_state(self) -> int:
        """Shares the streams layout copied through the state API, not llama.cpp's whole-stream copy
        (state_copy.py; diagnostics)."""
        return self._state_copy.copies if self._state_copy is not None else 0

    def _held(self, seq_id: int) -> int:
        return self._names.held(seq_id)

    def kv_cells_used(self) -> int:
        """Cells the running slots hold (sum over slots of max position + 1; cached prefixes not included):
        for tests and diagnostics."""
        with self._lock:
            self._check_open()
            return sum(self._held(slot) for slot in range(self.info.max_slots))

    def close(self) -> None:
        with self._lock:
            if self._ctx:
                llama_cpp.llama_free(self._ctx)
                self._ctx = None
            if self._model:
                (self.keep_model or llama_cpp.llama_model_free)(self._model)
                self._model = None

    def _check_open(self) -> None:
        if not self._ctx:
            raise BackendError("the llama.cpp runtime is closed", "load the bundle again")

    def __del__(self) -> None:  # a forgotten close() must not leak the context's KV memory
        try:
            self.close()
        except Exception:
            pass
