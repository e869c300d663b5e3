"""Per-sequence grammar state and the batch's token masks, computed beside the forward pass.

A :class:`TokenConstraint` follows one sequence: it says which tokens may come next (a mask) and is
advanced with every token the sequence samples. Once the grammar can take no further token
(``is_finished``), the engine ends the sequence with finish_reason "stop".

:class:`MaskComputer` fills the masks of every constrained sequence of a step in one llguidance call
(``fill_next_token_bitmask_par``: the work is spread over llguidance's own threads and runs without the
GIL) on a helper thread, started *before* the runtime's forward pass and collected after it. A mask
depends only on the tokens already sampled, so it is ready when the logits are: the mask costs wall time
only when it takes longer than the forward itself, and unconstrained sequences never wait for it.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import llguidance
import llguidance.numpy as llnp
import numpy as np

from edgeopt.engine.grammar import Grammar
from edgeopt.errors import BackendError

# llguidance threads for one step's masks. A JSON mask over a 151k vocabulary costs 0.1-0.7 ms (most in
# string contents, where nearly every token is allowed): 16 of them take ~10 ms of a step's forward.
MASK_THREADS = 2


class TokenConstraint:
    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.matcher = grammar.new_matcher()

    @property
    def is_finished(self) -> bool:
        """No token but end-of-generation can follow: the output is complete."""
        return self.matcher.is_stopped()

    def advance(self, token: int) -> None:
        """Record a sampled token; the mask made it legal, so a refusal is an engine bug."""
        if not self.matcher.consume_token(token):
            raise BackendError(f"the grammar refused token {token}: {self.matcher.get_error()}",
                               "this is an engine bug (a token outside the mask was sampled); please report it")


@dataclass(frozen=True)
class StepMasks:
    """One step's masks: ``bitmask[i]`` is row i's packed allowed-token bits (all ones for an unconstrained
    row), kept packed because unpacking a whole 16 x 151k batch costs more than the sampler needs: see
    :func:`edgeopt.engine.sampler.sample_next_tokens`; ``errors[i]`` is set when row i's grammar failed
    (that request fails, the others go on)."""

    bitmask: np.ndarray  # (rows, ceil(vocab / 32)) int32, bit i of word w is token 32*w + i
    errors: list[BackendError | None]


def _grammar_error(constraint: TokenConstraint | None) -> BackendError | None:
    if constraint is None or not constraint.matcher.is_error():
        return None
    return BackendError(f"the grammar failed while computing its mask: {constraint.matcher.get_error()}",
                        "simplify the schema or grammar")


class MaskComputer:
    """Computes the masks of a step's constrained sequences on a helper thread (see module docstring)."""

    def __init__(self, vocab_size: int, threads: int = MASK_THREADS) -> None:
        self.vocab_size = vocab_size
        self._threads = threads
        # Both made on the first constrained step: a server that never sees a grammar starts no thread.
        self._executor: llguidance.LLExecutor | None = None
        self._thread: ThreadPoolExecutor | None = None
        self.steps = 0  # steps with at least one constrained row
        self.compute_seconds = 0.0  # spent in compute(), on the helper thread

    def start(self, constraints: list[TokenConstraint | None]) -> Future[StepMasks] | None:
        """Begin the masks for one step's sampled rows (None: unconstrained row). None when no row is
        constrained, so an unconstrained batch pays nothing."""
        if all(c is None for c in constraints):
            return None
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="edgeopt-masks")
        return self._thread.submit(self.compute, constraints)

    def compute(self, constraints: list[TokenConstraint | None]) -> StepMasks:
        """Every row's allowed tokens, computed in one parallel call; a grammar that failed (a parser
        resource limit) gives that row its error, the others go on."""
        start = time.perf_counter()
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self._threads)
        rows = [(c.matcher, i) for i, c in enumerate(constraints) if c is not None]
        bitmask = llnp.allocate_token_bitmask(len(constraints), self.vocab_size)
        llnp.fill_next_token_bitmask_par(self._executor, rows, bitmask)
        # Unconstrained rows keep the allocation's all-ones bits: every token allowed.
        masks = StepMasks(bitmask, [_grammar_error(c) for c in constraints])
        self.steps += 1
        self.compute_seconds += time.perf_counter() - start
        return masks

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)
