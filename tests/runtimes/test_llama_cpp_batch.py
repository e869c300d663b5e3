"""edgeopt.runtimes.llama_cpp.batch: the llama_batch the runtime fills, decode tokens and prompt chunks mixed."""

from __future__ import annotations

import numpy as np

from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp.batch import NumpyBatch


def test_fill_lays_decode_tokens_and_chunks_back_to_back_with_their_logits_flags() -> None:
    batch = NumpyBatch(16)
    batch.fill([StepInput(9, [1, 2, 3, 4], 0, False)] * 3)  # stale flags and values a later fill must overwrite
    outputs = batch.fill([StepInput(3, [7], 12, True),  # a decode token that samples
                          StepInput(5, [8, 9, 10], 4, True),  # a prompt chunk: logits after its last token
                          StepInput(6, [11], 30, False),  # a padding token: no logits
                          StepInput(2, [12, 13], 0, True, all_logits=True)])  # prompt logprobs: every row
    n = batch.struct.n_tokens
    assert (n, outputs) == (7, 1 + 1 + 2)
    assert batch.tokens[:n].tolist() == [7, 8, 9, 10, 11, 12, 13]
    assert batch.positions[:n].tolist() == [12, 4, 5, 6, 30, 0, 1]
    assert batch.seq_values[:n].tolist() == [3, 5, 5, 5, 6, 2, 2]
    assert batch.logits[:n].tolist() == [1, 0, 0, 1, 0, 1, 1]
    assert np.all(batch.n_seq_id[:n] == 1)
