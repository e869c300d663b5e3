"""A step's sampling: one token per sampling row, under its grammar, with its logprob when asked.

The numbers are :mod:`edgeopt.engine.sampler`'s (penalties, bias, temperature, truncation, the draw); the
grammar masks are :mod:`edgeopt.engine.constraint`'s. This component puts them in the step's order:

1. before the forward pass, :meth:`StepSampler.start` plans each constrained row (its pick checked after
   an unmasked draw where that is exact, else its mask computed beside the forward pass);
2. after it, :meth:`StepSampler.collect` waits for those masks and :meth:`StepSampler.sample` draws the
   batch at once (row by row if that raises, so one bad request fails alone), asks each grammar about the
   picks it lets wait, redraws the refused rows under their masks (one llguidance call for all of them)
   and computes logprobs from the same processed logits the draw used;
3. :meth:`StepSampler.draw` draws one row the same way, for the speculation verifier's rows.

Whatever fails comes back in place of that row's pick, for the scheduler to fail that request alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import numpy as np

from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.constraint import MaskComputer, StepMasks
from edgeopt.engine.logprobs import log_softmax, token_logprob
from edgeopt.engine.sampler import mask_can_wait, processed_logits, sample_masked_row, sample_next_tokens
from edgeopt.engine.scheduled import Pick
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.token_bitmask import allowed_tokens

log = logging.getLogger(__name__)
Masks = StepMasks | Exception | None  # a step's masks, what computing them raised, or None: no row needed one


class StepSampler:
    def __init__(self, vocab_size: int) -> None:
        self.masks = MaskComputer(vocab_size)
        self.grammar_steps = 0  # steps with at least one constrained row
        self.mask_wait_s = 0.0  # engine-thread time blocked on masks after the forward pass
        self.apply_s = 0.0  # engine-thread time sampling and applying the steps that had masks

    def start(self, sampled: list[Sequence]) -> Future[StepMasks] | None:
        """Before the forward pass: begin the masks of the constrained rows whose pick cannot be checked
        after an unmasked draw (edgeopt.engine.constraint); None when there are none."""
        return self.masks.start([s.constraint for s in sampled], [mask_can_wait(s.params) for s in sampled])

    def collect(self, pending: Future[StepMasks] | None) -> Masks:
        """The step's masks, or what computing them raised: then the constrained requests fail and the
        others go on."""
        if pending is None:
            return None
        start = time.perf_counter()
        try:
            return pending.result()
        except Exception as exc:
            log.exception("computing grammar masks failed")
            return exc
        finally:
            self.mask_wait_s += time.perf_counter() - start

    @contextmanager
    def applying(self, sampled: list[Sequence]) -> Iterator[None]:
        """Times sampling and applying a step (checked picks, redone masks, advanced grammars included) when
        one of its rows is constrained: the grammar's share of the engine thread, for /metrics."""
        started = time.perf_counter()
        yield
        if any(s.constraint is not None for s in sampled):
            self.grammar_steps += 1
            self.apply_s += time.perf_counter() - started

    def sample(self, sampled: list[Sequence], logits: np.ndarray, masks: Masks) -> list[Pick | Exception]:
        """One pick per sampling sequence (row i of ``logits`` is ``sampled[i]``'s), or what failed it."""
        bitmask = masks.bitmask if isinstance(masks, StepMasks) else None
        tokens = self._sample(logits, sampled, bitmask)
        failures = [token if isinstance(token, Exception) else _grammar_failure(masks, i, seq)
                    for i, (seq, token) in enumerate(zip(sampled, tokens))]
        self._redraw_refused(logits, sampled, tokens, failures)
        picks: list[Pick | Exception] = []
        for i, (seq, token, failure) in enumerate(zip(sampled, tokens, failures)):
            if failure is not None or isinstance(token, Exception):  # a failed draw is among the failures
                picks.append(failure or token)  # type: ignore[arg-type]
                continue
            try:
                row_mask = bitmask[i] if bitmask is not None and seq.constraint is not None else None
                picks.append(Pick(token, _logprob(logits[i], seq, row_mask, token)))
            except Exception as exc:  # only this request fails
                log.exception("the logprob of token %d of request %s failed", token, seq.request_id)
                picks.append(exc)
        return picks

    def draw(self, row: np.ndarray, seq: Sequence) -> Pick:
        """One token from one row, as an ordinary step draws it: the grammar's mask when the pick needs it
        (checked first where that is exact), the same generator. Raises what fails."""
        constraint = seq.constraint
        mask = None
        token = -1
        if constraint is None or mask_can_wait(seq.params):
            token = sample_next_tokens(row[None, :], [seq])[0]
        if constraint is not None and (token < 0 or not constraint.allows(token)):
            masks = self.masks.compute([constraint])
            if masks.errors[0] is not None:
                raise masks.errors[0]
            mask = masks.bitmask[0]
            token = sample_masked_row(row, seq, mask)
        return Pick(token, _logprob(row, seq, mask, token))

    def close(self) -> None:
        self.masks.close()

    def _redraw_refused(self, logits: np.ndarray, sampled: list[Sequence], tokens: list[int | Exception],
                        failures: list[Exception | None]) -> None:
        """Rows whose mask waited were drawn unmasked: each grammar checks its row's pick, and the rows it
        refuses get their masks (one call for all) and are drawn again under them, in place."""
        waited = [s.constraint if _mask_waits(s) else None for s in sampled]
        refused = self.masks.refused_picks(waited, tokens)
        if not refused:
            return
        masks: StepMasks | Exception
        try:
            masks = self.masks.redo_masks([waited[i] for i in refused])
        except Exception as exc:
            log.exception("computing grammar masks failed")
            masks = exc
        for row, i in enumerate(refused):
            failures[i] = masks if isinstance(masks, Exception) else masks.errors[row]
            if isinstance(masks, StepMasks) and failures[i] is None:
                try:
                    tokens[i] = sample_masked_row(logits[i], sampled[i], masks.bitmask[row])
                except Exception as exc:  # row by row: a failure stays with its request
                    failures[i] = exc

    @staticmethod
    def _sample(logits: np.ndarray, seqs: list[Sequence], bitmask: np.ndarray | None) -> list[int | Exception]:
        """Sample the batch at once; if that raises, row by row so one bad request fails alone."""
        try:
            return list(sample_next_tokens(logits, seqs, bitmask))
        except Exception:
            log.exception("batch sampling failed; sampling row by row to isolate the request")
        tokens: list[int | Exception] = []
        for i, seq in enumerate(seqs):
            try:
                row_mask = None if bitmask is None else bitmask[i:i + 1]
                tokens.append(sample_next_tokens(logits[i:i + 1], [seq], row_mask)[0])
            except Exception as exc:
                tokens.append(exc)
        return tokens


def _logprob(row: np.ndarray, seq: Sequence, packed_mask: np.ndarray | None, token: int) -> TokenLogprob | None:
    """From the same processed logits the sampler drew from (before appending the token: penalties see the
    same history, and the full grammar mask, unpacked for this row only); see edgeopt.engine.logprobs."""
    if seq.params.logprobs is None:
        return None
    allowed = None if packed_mask is None else allowed_tokens(packed_mask, row.shape[-1])
    return token_logprob(log_softmax(processed_logits(row, seq, allowed)), token, seq.params.logprobs)


def _mask_waits(seq: Sequence) -> bool:
    """A constrained row drawn without its mask this step (see edgeopt.engine.constraint)."""
    return seq.constraint is not None and seq.constraint.checks_pick


def _grammar_failure(masks: Masks, row: int, seq: Sequence) -> Exception | None:
    """Why ``seq`` (row ``row``) cannot take this step's token: its grammar failed, or the whole eager mask
    computation did (which only concerns the rows whose masks it computed)."""
    if isinstance(masks, StepMasks):
        return masks.errors[row]
    return masks if masks is not None and seq.constraint is not None and not _mask_waits(seq) else None
