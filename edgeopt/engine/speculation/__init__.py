"""Speculative decoding inside the engine's step: guessed tokens ride in the same forward pass as the other
sequences' decode tokens, and only the tokens the target model itself draws are emitted.

* :mod:`.ngram` drafts from the sequence's own prompt and output (prompt lookup);
* :mod:`.draft_model` drafts with a small model in a second runtime (serve --draft), its KV kept in step;
  :mod:`.draft_vocab` refuses a draft whose vocabulary is not the target's;
* :mod:`.controller` decides, per step and per sequence, how many drafted tokens are worth verifying;
* :mod:`.drafting` attaches the drafts to a scheduled step's decode chunks (the scheduler's last decision);
* :mod:`.verify` walks a verified block of logits rows: draws each token from the target's processed
  distribution and keeps drafted KV only as long as the draws agree with the draft (``DraftVerifier``);
* :mod:`.draft_verify` judges a draft model's sampled guesses by speculative sampling's rule, with the
  sampler's exact distribution (:mod:`.distribution`);
* :mod:`.setup` decides whether an engine speculates at all, from the mode and what its runtime can do;
* :mod:`.counters` counts drafted and accepted tokens per drafting source (for /metrics).
"""

from edgeopt.engine.speculation.controller import SpeculationController
from edgeopt.engine.speculation.counters import SpeculationCounters
from edgeopt.speculation_modes import SPECULATIVE_MODES

__all__ = ["SPECULATIVE_MODES", "SpeculationController", "SpeculationCounters"]
