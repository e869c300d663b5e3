"""Prefix cache on the fake runtime, whose KV cells have identities: reused prefixes give the same greedy
tokens as computing them, eviction frees exactly what the engine thinks, and cached KV never blocks
admission or overflows the capacity (the fake raises on any overflow)."""

from __future__ import annotations

import asyncio
import random

import pytest

from edgeopt.engine import Engine, SamplingParams
from tests.engine.helpers import generate_all, make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def cached_engine(shares: bool = True, capacity: int = 4096, slots: int = 4, cache_slots: int = 8,
                  step_delay_s: float = 0.0, **config):
    runtime = FakeRuntime(kv_capacity_tokens=capacity, max_slots=slots, context_length=1024,
                          cache_slots=cache_slots, shares_kv_cells=shares, step_delay_s=step_delay_s)
    return make_engine(runtime, **config)


async def ask(engine: Engine, prompt: list[int], params: SamplingParams = GREEDY) -> list[int]:
    ask.count = getattr(ask, "count", 0) + 1  # type: ignore[attr-defined]
    rid = f"t{ask.count}"  # type: ignore[attr-defined]
    return (await generate_all(engine, {rid: prompt}, params))[rid].token_ids


def run_turns(engine: Engine, prompts: list[list[int]]) -> list[list[int]]:
    """Each prompt alone, one after the other."""

    async def body(e: Engine) -> list[list[int]]:
        return [await ask(e, prompt) for prompt in prompts]

    return run_engine(engine, body)


def check_physical_books(engine: Engine, runtime: FakeRuntime) -> None:
    """What the engine charges equals the distinct cells the runtime holds."""
    stats = engine.stats()
    assert stats.kv_used_tokens == runtime.kv_used_tokens == 0
    assert stats.kv_cached_tokens == runtime.kv_cells_total
    assert not runtime.violations


@pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])
def test_second_turn_reuses_first_turn_prompt_and_answer(shares: bool) -> None:
    engine, runtime = cached_engine(shares)
    system = runtime.tokenizer.encode("You are terse. " * 10)
    turn1 = system + list(b"user: hi\n")

    async def chat(e: Engine) -> tuple[list[int], list[int], list[int]]:
        answer1 = await ask(e, turn1)
        turn2 = turn1 + answer1 + list(b"\nuser: more\n")
        return answer1, turn2, await ask(e, turn2)

    answer1, turn2, answer2 = run_engine(engine, chat)
    assert answer2 == runtime.greedy_reference(turn2, 8)
    stats = engine.stats()
    # Turn 2 borrowed turn 1's prompt and all of its answer but the last token (never fed to the model).
    assert stats.prefix_cache_hits_total == 1 and stats.prefix_cache_queries_total == 2
    assert stats.prefix_cache_hit_tokens_total == len(turn1) + len(answer1) - 1
    assert stats.prefill_tokens_total == len(turn1) + len(turn2) - (len(turn1) + len(answer1) - 1)
    check_physical_books(engine, runtime)
    # Turn 1's entry was folded into turn 2's: one entry holding turn 2's computed tokens.
    assert list(runtime.cached_sequences().values()) == [turn2 + answer2[:-1]]


def test_conversations_sharing_a_system_prompt_share_its_cells() -> None:
    engine, runtime = cached_engine(True)
    system = runtime.tokenizer.encode("S" * 100)
    prompts = [system + list(f"user {i}: question\n".encode()) for i in range(4)]
    outputs = run_turns(engine, prompts)
    assert outputs == [runtime.greedy_reference(p, 8) for p in prompts]
    shared = len(system) + len(b"user ")  # the prompts part after "user "
    assert engine.stats().prefix_cache_hit_tokens_total == 3 * shared
    check_physical_books(engine, runtime)
    # The shared cells are held once for the four entries.
    assert runtime.kv_cells_total == shared + sum(len(p) - shared + 7 for p in prompts)


def test_a_conversation_continues_its_entry_without_copying_and_others_copy_once() -> None:
    """Copying runtimes (ONNX, llama.cpp streams): parking a finished request and continuing it in the next
    turn rename KV (move_kv); a new conversation on the same system prompt copies the shared part, and
    leaves the first conversation's entry whole for that conversation's own next turn."""
    engine, runtime = cached_engine(False)
    system = runtime.tokenizer.encode("You are terse. " * 10)
    # Each user message is longer than CONTINUE_MAX_DROPPED: a new conversation, not a continuation.
    first = [system + list(f"user {i}: what is the weather like today?\n".encode()) for i in range(3)]

    async def chat(e: Engine) -> tuple[list[list[int]], list[int], list[list[int]], list[int]]:
        answers = [await ask(e, prompt) for prompt in first]
        copied_after_turn1 = [runtime.copied_cells]
        seconds = [prompt + answer + list(b"\nuser: more\n") for prompt, answer in zip(first, answers)]
        for prompt in seconds:
            await ask(e, prompt)
            copied_after_turn1.append(runtime.copied_cells)
        return answers, copied_after_turn1, seconds, []

    answers, copied, seconds, _ = run_engine(engine, chat)
    shared = len(system) + len(b"user ")
    assert copied[0] == 2 * shared  # conversations 1 and 2 copied the system prompt out of conversation 0's entry
    assert copied[1:] == [copied[0]] * 3  # every second turn took its own entry: nothing copied
    stats = engine.stats()
    assert stats.prefix_cache_hit_tokens_total == 2 * shared + sum(len(p) + len(a) - 1 for p, a in zip(first, answers))
    assert runtime.moves == 6 + 3  # six parks, three continuations
    check_physical_books(engine, runtime)
    assert sorted(runtime.cached_sequences().values()) == sorted(
        p + runtime.greedy_reference(p, 8)[:-1] for p in seconds)


def test_the_last_route_to_a_shared_prefix_is_copied_not_taken() -> None:
    """A leaf whose parent has no other child is the only way to the parent's KV: a continuation copies it."""
    # Steps of 10 ms: "ca" must still be running when "cb" is admitted. With instant steps the engine thread
    # could finish and park "ca" within one GIL slice, before the loop thread queued "cb" (seen under load:
    # the parent then had a child again and "cb" took its entry without a copy).
    engine, runtime = cached_engine(False, step_delay_s=0.01)
    system = runtime.tokenizer.encode("S" * 60)
    a, b = system + list(b"user a: what is the weather like?\n"), system + list(b"user b: and tomorrow?\n")

    async def body(e: Engine) -> tuple[list[int], int]:
        answer_a = await ask(e, a)
        await ask(e, b)  # entry b beside entry a, below their shared system-prompt node
        # Continue both at once: the first takes its entry, the second finds its parent with one child left.
        results = await generate_all(e, {"ca": a + answer_a + list(b"more\n"), "cb": b + list(b"x")}, GREEDY)
        return results["ca"].token_ids, runtime.copied_cells

    run_result = run_engine(engine, body)
    check_physical_books(engine, runtime)
    _, copied = run_result
    # b's first turn copied the shared part; "cb" copied all of b's prompt (its answer's first token differs).
    assert copied == len(system) + len(b"user ") + len(b)


@pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])
def test_a_burst_of_conversations_on_one_system_prompt_computes_it_once(shares: bool) -> None:
    """Four conversations arrive together (nothing cached yet): the first computes the system prompt, the
    others wait for it and borrow it from the cache while it still runs (llama-server's slots would
    each compute it)."""
    engine, runtime = cached_engine(shares, step_token_budget=32, prefill_chunk=16)
    system = runtime.tokenizer.encode("You are terse and exact. " * 8)
    prompts = {f"c{i}": system + list(f"user {i}: and the weather?\n".encode()) for i in range(4)}

    results = run_engine(engine, lambda e: generate_all(e, prompts, GREEDY), autostart=False)  # all queued first
    for rid, prompt in prompts.items():
        assert results[rid].token_ids == runtime.greedy_reference(prompt, 8)
    shared = len(system) + len(b"user ")
    stats = engine.stats()
    assert stats.prefix_cache_hits_total == 3 and stats.prefix_cache_hit_tokens_total == 3 * shared
    assert stats.prefill_tokens_total == sum(len(p) for p in prompts.values()) - 3 * shared
    if not shares:  # one copy of a running sequence's prefix for each of the others, handed over (renamed)
        assert runtime.copied_cells == 3 * shared
    check_physical_books(engine, runtime)


def test_a_prompt_waiting_for_a_running_prefix_lets_others_go_first() -> None:
    engine, runtime = cached_engine(True, step_token_budget=16, prefill_chunk=8)
    system = runtime.tokenizer.encode("S" * 80)
    prompts = {"first": system + list(b"a?"), "same-system": system + list(b"b?"),
               "other": runtime.tokenizer.encode("an unrelated question?")}
    fed: list[tuple[int, int, list[int]]] = []  # (slot, start position, tokens) of every chunk, in order
    step = runtime.step

    def recording_step(batch):
        fed.extend((item.slot, item.start_pos, item.tokens) for item in batch)
        return step(batch)

    runtime.step = recording_step  # type: ignore[method-assign]
    results = run_engine(engine, lambda e: generate_all(e, prompts, GREEDY), autostart=False)  # all queued first
    assert all(results[rid].token_ids == runtime.greedy_reference(p, 8) for rid, p in prompts.items())
    # Each request's slot, from the first chunk it was fed (all three run at once: no slot is reused).
    slot_of = {}
    for slot, start, tokens in fed:
        if slot not in slot_of.values():
            rid = ("same-system" if start == len(system) else "other" if tokens[:4] == prompts["other"][:4]
                   else "first")
            slot_of[rid] = slot
    first_fed = {rid: next(i for i, (slot, _, _) in enumerate(fed) if slot == slot_of[rid]) for rid in prompts}
    assert first_fed["first"] < first_fed["other"] < first_fed["same-system"]
    # "same-system" computed only its own tail, after "first" had computed the whole system prompt.
    assert [start for slot, start, _ in fed if slot == slot_of["same-system"]][0] == len(system)
    system_done = max(i for i, (slot, start, _) in enumerate(fed) if slot == slot_of["first"] and start < len(system))
    assert first_fed["same-system"] > system_done
    check_physical_books(engine, runtime)


def test_cache_off_computes_everything() -> None:
    engine, runtime = cached_engine(True, prefix_cache=False)
    prompt = runtime.tokenizer.encode("abc" * 20)
    run_turns(engine, [prompt, prompt])
    stats = engine.stats()
    assert stats.prefix_cache_queries_total == 0 and stats.kv_cached_tokens == 0
    assert runtime.kv_cells_total == 0 and stats.prefill_tokens_total == 2 * len(prompt)


def test_with_the_cache_off_a_prompt_sharing_a_running_prefix_does_not_wait_for_it() -> None:
    """The null cache lends nothing, so waiting for a running sequence's prefix would only delay the prompt:
    the second prompt starts (at position 0) before the first has computed the shared system prompt."""
    engine, runtime = cached_engine(True, step_token_budget=16, prefill_chunk=8, prefix_cache=False)
    system = runtime.tokenizer.encode("S" * 80)
    prompts = {"first": system + list(b"a?"), "same-system": system + list(b"b?")}
    fed: list[tuple[int, int]] = []  # (slot, start position) of every chunk, in order
    step = runtime.step

    def recording_step(batch):
        fed.extend((item.slot, item.start_pos) for item in batch)
        return step(batch)

    runtime.step = recording_step  # type: ignore[method-assign]
    run_engine(engine, lambda e: generate_all(e, prompts, GREEDY), autostart=False)  # both queued first
    first_slot = fed[0][0]
    second_starts = next(i for i, (slot, _) in enumerate(fed) if slot != first_slot)
    system_done = next(i for i, (slot, start) in enumerate(fed) if slot == first_slot and start >= len(system))
    assert fed[second_starts][1] == 0 and second_starts < system_done
    assert engine.stats().prefix_cache_queries_total == 0


def test_identical_prompt_is_served_from_cache_but_its_last_token_is_recomputed() -> None:
    engine, runtime = cached_engine(True)
    prompt = runtime.tokenizer.encode("same prompt")
    first, second = run_turns(engine, [prompt, prompt])
    assert first == second == runtime.greedy_reference(prompt, 8)
    assert engine.stats().prefix_cache_hit_tokens_total == len(prompt) - 1


@pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])
def test_cached_kv_is_evicted_lru_and_never_blocks_admission(shares: bool) -> None:
    # 300 cells: each 120-token prompt (+8 output) must evict older entries to be admitted.
    engine, runtime = cached_engine(shares, capacity=300, slots=2, cache_slots=4)
    prompts = [runtime.tokenizer.encode(chr(65 + i) * 120) for i in range(6)]
    outputs = run_turns(engine, prompts + [prompts[-1]])
    assert outputs[:6] == [runtime.greedy_reference(p, 8) for p in prompts]
    assert outputs[6] == outputs[5]
    stats = engine.stats()
    # Every prompt after the first borrowed the BOS; the repeated one all but its last token.
    assert stats.prefix_cache_hit_tokens_total == 5 + len(prompts[-1]) - 1
    assert stats.preemptions_total == 0 and stats.prefix_cache_evicted_tokens_total > 0
    check_physical_books(engine, runtime)
    assert runtime.kv_cells_total <= 300


def test_clear_empties_the_cache() -> None:
    engine, runtime = cached_engine(True)
    run_turns(engine, [runtime.tokenizer.encode("x" * 50), runtime.tokenizer.encode("y" * 50)])
    assert engine.stats().kv_cached_tokens == runtime.kv_cells_total == 1 + 2 * (50 + 7)  # one BOS
    freed = engine.clear_prefix_cache()
    assert freed > 0 and engine.stats().kv_cached_tokens == 0 and runtime.kv_cells_total == 0


def test_clear_runs_on_a_live_engine_thread() -> None:
    engine, runtime = cached_engine(True)

    async def body(e: Engine) -> int:
        await generate_all(e, {"a": runtime.tokenizer.encode("z" * 40)}, GREEDY)
        return await asyncio.to_thread(e.clear_prefix_cache)

    assert run_engine(engine, body) == 1 + 40 + 7  # BOS, prompt, 7 of 8 generated
    assert runtime.kv_cells_total == 0


@pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])
def test_random_load_with_aborts_and_preemption_matches_the_uncached_tokens(shares: bool) -> None:
    """Conversations over shared prefixes on a cache too small for them: greedy outputs equal the
    reference whatever was borrowed, evicted, preempted or aborted; the books match the cells."""
    engine, runtime = cached_engine(shares, capacity=220, slots=4, cache_slots=6, step_token_budget=48,
                                    prefill_chunk=16)
    rng = random.Random(11)
    stems = [runtime.tokenizer.encode(word * 30) for word in ("ab", "cd", "ef")]

    async def client(e: Engine, i: int) -> tuple[list[int], list[int], str]:
        await asyncio.sleep(rng.random() * 0.05)
        prompt = rng.choice(stems) + list(rng.choice(["q", "qq", "r", ""]).encode()) + [65 + i % 3]
        params = SamplingParams(max_tokens=rng.randint(10, 60), temperature=0.0, ignore_eos=True)
        stream = e.add_request(f"c{i}", prompt, params)
        tokens, abort_after = [], rng.choice([None, None, None, 2])
        reason = ""
        async for out in stream:
            tokens += out.token_ids
            reason = out.finish_reason or reason
            if abort_after is not None and len(tokens) >= abort_after and not out.finished:
                e.abort(f"c{i}")
        return prompt, tokens, reason

    async def body(e: Engine) -> list[tuple[list[int], list[int], str]]:
        results = await asyncio.gather(*(client(e, i) for i in range(40)))
        await asyncio.sleep(0.05)
        return results

    for prompt, tokens, reason in run_engine(engine, body):
        assert reason in ("length", "abort")
        assert tokens == runtime.greedy_reference(prompt, len(tokens))
    stats = engine.stats()
    assert stats.prefix_cache_hits_total > 0 and stats.preemptions_total > 0
    check_physical_books(engine, runtime)
    engine.clear_prefix_cache()
    assert runtime.kv_cells_total == 0


class RecordingStorage:
    """The runtime side of PrefixCache as plain token lists (shared cells), recording every call."""

    def __init__(self) -> None:
        self.sequences: dict[int, list[int]] = {}

    def share_kv(self, source: int, target: int, start: int, end: int) -> None:
        assert len(self.sequences.get(target, [])) == start
        self.sequences[target] = self.sequences.get(target, []) + self.sequences[source][start:end]

    def trim(self, slot: int, tokens: int) -> None:
        del self.sequences[slot][tokens:]

    def release(self, slot: int) -> None:
        self.sequences.pop(slot, None)


def test_parking_evicts_until_an_id_is_free_even_when_an_eviction_frees_none() -> None:
    """Evicting a leaf whose parent has no other child hands its id to the parent (it frees no id), so
    parking must go on evicting rather than fail (it raised IndexError)."""
    from edgeopt.engine.prefix_cache_modes import SharedCellsCache
    from edgeopt.engine.prefix_tree import SHARED_NAMESPACE

    storage = RecordingStorage()
    cache = SharedCellsCache(storage, range(10, 12))

    def park(tokens: list[int]) -> bool:
        storage.sequences[0] = list(tokens)  # slot 0 computed them
        parked = cache.park(0, tokens, SHARED_NAMESPACE)
        storage.release(0)
        return parked

    assert park([1, 2, 3, 4]) and park([1, 2, 7, 8])  # two leaves under the shared [1, 2]
    assert park([5, 6])  # evicts [3, 4] (LRU): its sibling keeps [1, 2]; its id is reused
    assert park([9, 9])  # evicts [7, 8]: [1, 2] inherits that id, so no id is free yet; evict on
    assert cache.entries() == 2 and sorted(map(tuple, storage.sequences.values())) == [(5, 6), (9, 9)]
    assert cache.cells == 4
