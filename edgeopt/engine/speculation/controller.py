"""Which sequences speculate this step, and how many drafted tokens each verifies.

Per sequence, acceptance is the share of drafted tokens the target agreed with (decayed counts, so a
sequence that moves from quoting to free text is noticed within a few steps). Drafting k tokens whose
acceptance rate is a gains, in expectation, a + a^2 + ... + a^k tokens (a drafted token is only emitted if
every one before it was). It costs k more tokens in the pass, priced by the pass-cost curve measured on this
device (:class:`StepCostModel`): a step producing B tokens over a pass of N tokens loses B x (t(N + k) / t(N) - 1)
tokens' worth of time to the draft, which must gain more. So a lone stream on a memory-bound CPU speculates
readily, and a full batch, whose pass is already mostly per-token work, does not at all.

A sequence that stopped drafting (its acceptance fell) keeps learning, so that it notices when it starts quoting
again: the n-gram draft it was not given is scored against the tokens it emits next, at no pass's cost (with a
draft model, whose proposals cost passes of their own, a short draft is verified every PROBE_EVERY steps).
Between two such lookups nothing that decides its drafting changes, so it is not looked at
(``Sequence.draft_wake_at``): a sequence that does not draft costs a step a comparison, which matters where a
step is a fraction of a millisecond (the trained demo model, one stream: 20 us of controller work a step was
4% of its decode; code run right after a pass runs from cold caches, several times slower than in a loop).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from edgeopt.engine.prefix_tree import common_prefix_length
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation.draft_state import DraftState, best_draft_length, expected_gain
from edgeopt.engine.speculation.ngram import NgramIndex
from edgeopt.engine.speculation.price_probe import PROBE_ACCEPTANCE, PriceProbe
from edgeopt.engine.speculation.price_probe import PROBE_TOKENS as PRICE_PROBE_TOKENS
from edgeopt.engine.speculation.step_cost import StepCostModel
from edgeopt.errors import ConfigError
from edgeopt.speculation_modes import MAX_DRAFT_TOKENS, check_mode

if TYPE_CHECKING:
    from edgeopt.engine.speculation.draft_model import DraftModel

ACCEPTANCE_DECAY = 0.8  # weight of past draft outcomes per new verification
PROBE_EVERY = 16
PROBE_TOKENS = 2
READ_BUDGET = 0.1  # auto with a draft model: the draft's catch-up read may cost this share of the request's rest
PROBE_SHARE = 0.1  # ... and a probe this share of the steps between two probes
UNSENT_TOKENS = 4  # n-gram: tokens of the draft a sequence was not given that are scored all the same
UNSENT_BACKOFF = 4  # ... looked up again after at most this many tokens while lookups keep missing
# A draft must gain this much more than it costs: the acceptance a sequence drafts at is the highest its recent
# outcomes reached (the winner's curse), and on a full batch a drafted token costs nearly a token, so drafts
# priced at their bare cost lost 6% at 16 streams (SmolLM2, 2 x86 cores); replayed at one stream, 1.25 gains as
# much as 1.0 does or more (copy-heavy 1.41x against 1.33x on this host's curve), 1.5 starts to lose.
COST_MARGIN = 1.25


class SpeculationController:
    def __init__(self, mode: str, draft_model: DraftModel | None = None) -> None:
        check_mode(mode)
        if mode == "draft" and draft_model is None:
            raise ConfigError("--speculative draft needs a draft model", "pass --draft BUNDLE_OR_GGUF")
        if draft_model is not None and mode not in ("draft", "auto"):
            raise ConfigError(f"--draft drafts with a model; --speculative {mode} asks for "
                              f"{'no speculation' if mode == 'off' else 'n-gram lookup'}",
                              "leave --speculative out (or use auto or draft) with --draft, or drop --draft")
        self.mode = mode
        self.draft_model = draft_model
        self.source = "draft" if draft_model is not None else "ngram"  # /metrics label of the drafting source
        self.cost = StepCostModel()
        self._costs: dict[tuple[int, float, int], tuple[list[float], bool]] = {}  # _draft_costs' answers at _costs_version
        self._costs_version: tuple[int, int] | None = None
        self.price_probe = PriceProbe()  # a draft now and then while none pays, so that a wrong price is found out

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def propose(self, decoding: list[Sequence], other_tokens: int, token_room: int, row_room: int,
                splits_mixed_lengths: bool) -> list[list[int]]:
        """Drafts for ``decoding`` (sequences feeding their one pending token this step; [] for those that do
        not speculate), using at most ``token_room`` more tokens and ``row_room`` more logits rows.
        ``other_tokens``: the pass's tokens besides those decode tokens (prefill chunks).
        ``splits_mixed_lengths``: the runtime runs sequences of different lengths in separate passes."""
        drafts: list[list[int]] = [[] for _ in decoding]
        if not self.enabled or not decoding:
            return drafts
        if splits_mixed_lengths and (len(decoding) > 1 or other_tokens):
            return drafts  # every draft would add a whole pass over the weights
        if self.draft_model is not None:
            return self._propose_from_model(decoding, min(token_room, row_room))
        awake = [i for i, seq in enumerate(decoding) if not self.asleep(seq)]
        if not awake:
            return drafts
        tokens = len(decoding) + other_tokens
        produced = float(len(decoding))
        room = min(token_room, row_room)
        costs, pays = self._draft_costs(tokens, produced, min(room, MAX_DRAFT_TOKENS))
        if not pays:  # not even drafts taken whole would pay (a full batch on a CPU): no lookups but a probe's
            return self._probe(decoding, awake, room, drafts, looked_up=False)
        for i in awake:
            self._score_unsent(decoding[i])
        if len(awake) > 1:
            awake.sort(key=lambda i: -self._state(decoding[i]).acceptance)
        for i in awake:
            seq = decoding[i]
            state = self._state(seq)
            limit = min(room, MAX_DRAFT_TOKENS, _tokens_left(seq))
            best_k = best_draft_length(state.acceptance, costs[:limit]) if limit > 0 else 0
            if best_k == 0:
                emitted = len(seq.output_ids)
                # Scored instead of verified (a probe would cost a pass's worth on a full batch and tell the same)
                if not state.unsent and limit > 0 and emitted >= state.lookup_at:
                    state.unsent = state.index.draft_sequence(seq.prompt_ids, seq.output_ids, UNSENT_TOKENS)
                    state.unsent_at = emitted
                    if not state.unsent:
                        self._missed(seq, state)
                # asleep until its unsent draft is all emitted (scored whole then) or its next lookup is due
                seq.draft_wake_at = (state.unsent_at + len(state.unsent) if state.unsent
                                     else max(state.lookup_at, emitted + 1))
                continue
            state.unsent = []  # a verified draft tells the same, and better
            draft = state.index.draft_sequence(seq.prompt_ids, seq.output_ids, best_k)
            if seq.constraint is not None and draft:  # a token the grammar refuses ends the draft
                draft = draft[:seq.constraint.matcher.validate_tokens(draft)]
            if not draft:
                continue
            drafts[i] = draft
            room -= len(draft)
            tokens += len(draft)
            produced += expected_gain(state.acceptance, len(draft))
            costs, _ = self._draft_costs(tokens, produced, min(room, MAX_DRAFT_TOKENS))
        if any(drafts):
            self.price_probe.start_over()
            return drafts
        return self._probe(decoding, awake, room, drafts, looked_up=True)

    def _probe(self, decoding: list[Sequence], awake: list[int], room: int, drafts: list[list[int]],
               looked_up: bool) -> list[list[int]]:
        """Nothing drafted at the prices now: when a probe is due (PriceProbe), the awake sequence most likely to
        take a draft verifies a short one all the same, so that its step's time tells the price. ``looked_up``:
        this step looked up the drafts not given (else none would pay whole, and the probe looks its own up)."""
        if not self.price_probe.due():
            return drafts
        i = max(awake, key=lambda i: self._state(decoding[i]).acceptance)
        seq = decoding[i]
        state = self._state(seq)
        limit = min(room, PRICE_PROBE_TOKENS, _tokens_left(seq))
        draft: list[int] = []
        if limit > 0 and state.acceptance >= PROBE_ACCEPTANCE:
            if looked_up:  # what is left of the draft it was not given (no lookup beyond the thinned ones)
                draft = state.unsent[len(seq.output_ids) - state.unsent_at:][:limit]
            else:
                draft = state.index.draft_sequence(seq.prompt_ids, seq.output_ids, limit)
        if seq.constraint is not None and draft:
            draft = draft[:seq.constraint.matcher.validate_tokens(draft)]
        self.price_probe.probed(bool(draft))
        if draft:
            state.unsent = []  # the verification scores it
            drafts[i] = draft
        return drafts

    def asleep(self, seq: Sequence) -> bool:
        """An n-gram sequence that nothing could make draft this step (``Sequence.draft_wake_at``; only the n-gram
        path sets it, so a draft model's sequences never sleep)."""
        self._state(seq)  # (a new sequence's first look decides whether auto drafts it at all)
        return len(seq.output_ids) < seq.draft_wake_at

    def _draft_costs(self, tokens: int, produced: float, longest: int) -> tuple[list[float], bool]:
        """costs[k - 1]: what growing a pass of ``tokens`` tokens by k drafted ones costs, in tokens: the step's
        ``produced`` tokens times the share of time it adds, times COST_MARGIN; and whether any k would pay if
        its whole draft were taken."""
        version = self.cost.prices_version()
        if version != self._costs_version:
            self._costs.clear()
            self._costs_version = version
        key = (tokens, produced, longest)
        found = self._costs.get(key)
        if found is None:
            step = self.cost.relative(tokens)
            costs = [COST_MARGIN * produced * (self.cost.relative(tokens + k) / step - 1.0)
                     for k in range(1, longest + 1)]
            found = self._costs[key] = (costs, any(cost < k for k, cost in enumerate(costs, 1)))
        return found

    def _propose_from_model(self, decoding: list[Sequence], room: int) -> list[list[int]]:
        """The draft model's tokens for each sequence while room lasts: --draft-tokens of them ("draft"), or in
        "auto" as many as pay (:meth:`_model_draft_size`). A grammar cuts a greedy draft at its first refused
        token; a constrained request that samples is not drafted (the acceptance rule would need its mask on
        every row)."""
        assert self.draft_model is not None
        drafts: list[list[int]] = [[] for _ in decoding]
        chosen: list[int] = []
        counts: list[int] = []
        for i, seq in enumerate(decoding):
            limit = min(room, self.draft_model.draft_tokens, _tokens_left(seq), self.draft_model.tokens_left(seq))
            if limit <= 0 or (seq.constraint is not None and seq.params.temperature > 0.0):
                continue
            if self.mode == "auto" and _asks_for_the_same_draw(seq):
                continue
            count = limit if self.mode == "draft" else self._model_draft_size(seq, limit, len(decoding))
            if count == 0:
                continue
            chosen.append(i)
            counts.append(count)
            room -= count
        proposals = self.draft_model.propose([decoding[i] for i in chosen], counts) if chosen else []
        for i, proposal in zip(chosen, proposals):
            seq, draft = decoding[i], proposal.tokens
            if seq.constraint is not None and draft:
                draft = draft[:seq.constraint.matcher.validate_tokens(draft)]
            drafts[i] = draft
            self._state(seq).draft_probs = proposal.probs
        return drafts

    def _model_draft_size(self, seq: Sequence, limit: int, decoding: int) -> int:
        """auto with a draft model: the k that pays, counting the draft's own passes (k of them: measured, else
        the draft's size relative to the target's) beside the verify tokens (the step-cost model), in units of
        the target's fixed pass cost; 0 when none does, but a short probe every PROBE_EVERY steps so that a
        sequence whose text grows predictable is noticed (where a probe costs at most PROBE_SHARE of the steps
        between two). Before drafting, the draft reads what it has not seen
        (a new request's whole prompt): when that read costs more than READ_BUDGET of what the rest of the
        request will take, it does not draft at all."""
        model = self.draft_model
        assert model is not None
        state = self._state(seq)
        ratio, fixed = self.cost.per_token_ratio(), self.cost.fixed_seconds()
        draft_units = model.pass_seconds / fixed if model.pass_seconds is not None and fixed else model.relative_cost
        rate = decoding / (1.0 + ratio * decoding)  # tokens per unit of fixed pass cost without drafts
        read = draft_units * (1.0 + ratio * max(model.unread_tokens(seq) - 1, 0))
        if read > READ_BUDGET * _tokens_left(seq) / max(rate, 1e-9):
            state.idle_steps += 1
            return 0
        best_k = best_draft_length(state.acceptance, [rate * (ratio + draft_units) * k for k in range(1, limit + 1)])
        probe = min(PROBE_TOKENS, limit)
        probe_cost = read + probe * (ratio + draft_units)
        if best_k == 0 and state.idle_steps >= PROBE_EVERY and probe_cost <= PROBE_SHARE * PROBE_EVERY / max(rate, 1e-9):
            best_k = probe
        state.idle_steps = 0 if best_k else state.idle_steps + 1
        return best_k

    def _score_unsent(self, seq: Sequence) -> None:
        """Score the draft a sequence was not given (it did not pay at the acceptance estimated then) against
        the tokens it has emitted since, as a verification would have: evidence at no pass's cost. Without it a
        sequence that stopped drafting hears how drafts would do only from a probe every PROBE_EVERY steps, and
        text that turns to copying (a document quoted after a preamble) went undrafted for most of the quote; and
        on a full batch, where a drafted token costs nearly a token, probes cost 5% (SmolLM2, 16 streams at T 0.7)."""
        state = self._state(seq)
        if not state.unsent:
            return
        emitted = seq.output_ids[state.unsent_at:state.unsent_at + len(state.unsent)]
        agreed = common_prefix_length(emitted, state.unsent)
        if agreed < len(emitted):  # a token it would have guessed wrong: a draft of that length fails there
            self.record(seq, agreed + 1, agreed)
            if agreed == 0:
                self._missed(seq, state)
            else:
                state.unsent_misses = 0
        elif agreed == len(state.unsent):  # it would have been taken whole
            self.record(seq, agreed, agreed)
            state.unsent_misses = 0
        else:
            return  # agreeing so far: more tokens to come
        state.unsent = []

    @staticmethod
    def _missed(seq: Sequence, state: DraftState) -> None:
        """Free text: each lookup costs the step a few microseconds (2% of a 0.5 ms step) and tells nothing, so
        they thin out, 1, 2, 4 tokens apart; one that helps brings them back to every token."""
        state.lookup_at = len(seq.output_ids) + min(1 << state.unsent_misses, UNSENT_BACKOFF)
        state.unsent_misses += 1

    def record(self, seq: Sequence, drafted: int, accepted: int) -> None:
        """The target agreed with the first ``accepted`` of ``drafted`` tokens."""
        state = self._state(seq)
        state.accepted = state.accepted * ACCEPTANCE_DECAY + accepted
        state.rejected = state.rejected * ACCEPTANCE_DECAY + (drafted > accepted)

    def observe_step(self, tokens: int, seconds: float) -> None:
        self.cost.observe(tokens, seconds)

    def _state(self, seq: Sequence) -> DraftState:
        if seq.draft_state is None:
            seq.draft_state = DraftState(NgramIndex())
            if self.mode == "auto" and self.draft_model is None and _asks_for_the_same_draw(seq):
                seq.draft_wake_at = sys.maxsize  # never drafted with n-grams (a draft model's are left out one by one)
        return seq.draft_state  # type: ignore[return-value]


def _asks_for_the_same_draw(seq: Sequence) -> bool:
    """A sampled request with a seed expects the same text every time it is sent. Drafts change the pass's shape,
    and with it llama.cpp's logits in their last bits, which moves near-tie draws; auto leaves it undrafted (the
    modes asked for by name draft it: the user chose speed)."""
    return seq.params.seed is not None and seq.params.temperature > 0.0


def _tokens_left(seq: Sequence) -> int:
    """Drafted tokens that could still be emitted: one token of every step is the target's own draw."""
    return seq.params.max_tokens - len(seq.output_ids) - 1
