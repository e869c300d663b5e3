"""Per-sequence grammar state and the batch's token masks: checked after sampling where that is exact,
computed beside the forward pass where it is not.

A :class:`TokenConstraint` follows one sequence: it says which tokens may come next (a mask, or whether
one token may: :meth:`TokenConstraint.allows`) and is advanced with every token the sequence samples.
Once the grammar can take no further token (``is_finished``), the engine ends the sequence with
finish_reason "stop".

A full mask over a 151k vocabulary costs 0.1-0.7 ms of llguidance work per row; checking one token costs
microseconds. So, as llama.cpp's ``common_sampler_sample`` does, rows whose draw stays exact that way
(:func:`edgeopt.engine.sampler.mask_can_wait`: greedy, or plain temperature without logprobs) sample from
their unmasked logits first; :meth:`MaskComputer.refused_picks` asks each grammar about its row's pick,
and only the refused rows get their mask (:meth:`MaskComputer.redo_masks`, one call for all of them) and
are drawn again under it. Greedy: the unmasked argmax, when allowed, is the masked argmax. Temperature:
one unmasked draw kept when allowed, else a draw under the mask, gives each allowed token
p(t) + (1 - p(A)) * p(t) / p(A) = p(t) / p(A), the masked distribution exactly.

A refused pick's mask is computed after the forward pass, on the step's critical path; one computed
beside the forward pass only competes with it for the cores. So a sequence whose grammar keeps refusing
its picks (a model that fights its schema, as random weights do at nearly every token) has its masks
computed beside the forward pass like the rows that need them, checking a pick now and then to notice
when it agrees again (:meth:`TokenConstraint.plan_step`). Measured with tests/bench/bench_json_schema.py
(random weights, ~97% of picks refused, 16 streams, 2 cores), every pick checked gave 0.86-0.89x of free
decoding where masks beside the forward gave 0.90-0.94x; on the 0.5B-shaped model (a 6x longer forward)
both are ~0.97-1.0x. Where picks agree with the grammar, checking 16 picks costs ~0.02 ms against ~0.8 ms
(uncontended) to 4-5 ms (beside llama.cpp's threads) for their 16 masks.

Rows that need the whole masked distribution (top-k / top-p / min-p truncate it, logprobs report it)
keep eager masks: :class:`MaskComputer` fills them in one llguidance call (``fill_next_token_bitmask_par``:
spread over llguidance's own threads, without the GIL) on a helper thread started *before* the runtime's
forward pass and collected after it. A mask depends only on the tokens already sampled, so it is ready
when the logits are; unconstrained sequences never wait for it.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import llguidance
import llguidance.numpy as llnp
import numpy as np

from edgeopt.engine.grammar import Grammar
from edgeopt.errors import ENGINE_BUG_HINT, BackendError

# llguidance threads for one step's masks. A JSON mask over a 151k vocabulary costs 0.1-0.7 ms (most in
# string contents, where nearly every token is allowed): 16 of them take ~10 ms of a step's forward.
MASK_THREADS = 2
# A sequence's share of refused picks is a moving average (this weight for the newest pick): above the
# threshold, its masks are computed beside the forward pass, except every PROBE_EVERY-th step, whose pick
# is checked again. Three refusals in a row cross it; a model that only now and then leaves its schema
# (free whitespace it may not write, say) stays below.
REFUSED_SHARE_WEIGHT = 0.25
EAGER_ABOVE_REFUSED_SHARE = 0.5
PROBE_EVERY = 8


class TokenConstraint:
    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.matcher = grammar.new_matcher()
        self.checks_pick = False  # this step: pick drawn unmasked, then checked (else: mask before the draw)
        self.refused_share = 0.0  # moving average over checked picks (see REFUSED_SHARE_WEIGHT)
        self._eager_steps = 0  # steps with an eager mask since the last checked pick

    @property
    def is_finished(self) -> bool:
        """No token but end-of-generation can follow: the output is complete."""
        return self.matcher.is_stopped()

    def allows(self, token: int) -> bool:
        """Whether this step's mask would allow ``token``, without computing the mask (one parser check).
        llguidance's ``validate_tokens`` refuses end-of-generation tokens, which the mask allows exactly
        when the grammar is accepting, so those are answered from ``is_accepting`` (the two agree bit for
        bit: tests/engine/test_lazy_masks.py)."""
        if token in self.grammar.eos_token_ids:
            return self.matcher.is_accepting()
        return self.matcher.validate_tokens([token]) == 1

    def plan_step(self, exact_unmasked: bool) -> bool:
        """Decide, once per step, whether its pick is drawn unmasked and checked (``checks_pick``); only
        where that is exact (``exact_unmasked``: edgeopt.engine.sampler.mask_can_wait) and worth it."""
        self.checks_pick = exact_unmasked
        if exact_unmasked and self.refused_share > EAGER_ABOVE_REFUSED_SHARE:
            self._eager_steps += 1
            self.checks_pick = self._eager_steps >= PROBE_EVERY
            if self.checks_pick:
                self._eager_steps = 0
        return self.checks_pick

    def record_check(self, allowed: bool) -> None:
        self.refused_share += REFUSED_SHARE_WEIGHT * (float(not allowed) - self.refused_share)

    def advance(self, token: int) -> None:
        """Record a sampled token; the mask made it legal, so a refusal is an engine bug."""
        if not self.matcher.consume_token(token):
            raise BackendError(f"the grammar refused token {token}, sampled from outside its mask: "
                               f"{self.matcher.get_error()}", ENGINE_BUG_HINT)


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
        self.compute_seconds = 0.0  # spent in compute(): eager masks (helper thread) and redone ones
        self.redo_seconds = 0.0  # of which redo_masks(), on the engine thread after the forward pass
        self.checked_total = 0  # picks drawn without a mask and checked against their grammar
        self.refused_total = 0  # of those, picks the grammar refused (drawn again under the mask)

    def start(self, constraints: list[TokenConstraint | None], exact_unmasked: list[bool]) -> Future[StepMasks] | None:
        """Plan one step's sampled rows (None: unconstrained row; ``exact_unmasked``: see
        TokenConstraint.plan_step) and begin the masks of those whose pick is not checked. None when there
        are none, so an unconstrained batch pays nothing."""
        eager = [c if c is not None and not c.plan_step(exact) else None
                 for c, exact in zip(constraints, exact_unmasked)]
        if all(c is None for c in eager):
            return None
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="edgeopt-masks")
        return self._thread.submit(self.compute, eager)

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
        self.compute_seconds += time.perf_counter() - start
        return masks

    def refused_picks(self, constraints: list[TokenConstraint | None], picks: list[int | Exception]) -> list[int]:
        """The rows whose pick, drawn without a mask, their grammar refuses (None: a row not checked this
        way; an Exception pick: that row failed already). A grammar in its error state refuses every pick,
        so its row reaches redo_masks, which reports the error."""
        checked = [(i, c, pick) for i, (c, pick) in enumerate(zip(constraints, picks))
                   if c is not None and isinstance(pick, int)]
        refused = []
        for i, constraint, pick in checked:
            allowed = constraint.allows(pick)
            constraint.record_check(allowed)
            if not allowed:
                refused.append(i)
        self.checked_total += len(checked)
        self.refused_total += len(refused)
        return refused

    def redo_masks(self, constraints: list[TokenConstraint | None]) -> StepMasks:
        """The masks of the rows whose pick was refused, now, on the engine thread: the forward pass is
        over, so this work has both cores (llama.cpp's threads are idle) instead of competing with it."""
        start = time.perf_counter()
        try:
            return self.compute(constraints)
        finally:
            self.redo_seconds += time.perf_counter() - start

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)
