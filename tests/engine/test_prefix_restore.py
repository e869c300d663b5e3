"""A swapped-out model's prefix cache coming back (Engine.cached_prefixes / Engine.restore_prefix) on the fake
runtime, whose KV cells have identities: entries are listed most recently used first, come back sharing the
cells of a common prefix (shared-cells mode) and in their recency order, continue a conversation with the
tokens computing it gives, and never evict anything nor overfill the cache."""

from __future__ import annotations

import pytest
from edgeopt.runtimes.base import StepInput

from edgeopt.engine import Engine
from tests.engine.helpers import run_engine
from tests.engine.test_prefix_cache import (
    ask,
    cached_engine,
    check_physical_books,
    run_turns,
)
from tests.fixtures.fake_runtime import FakeRuntime


def loader(runtime: FakeRuntime, tokens: list[int]):
    """What a saved state's load does: the slot ends up holding the KV of ``tokens``."""
    def fill(slot: int) -> bool:
        assert slot < runtime.info.max_slots and not runtime.slot_tokens(slot)  # a free running slot
        runtime.step([StepInput(slot, list(tokens), 0, False)])
        return True
    return fill


def conversations(runtime: FakeRuntime, count: int) -> list[list[int]]:
    system = runtime.tokenizer.encode("You are terse. " * 8)
    return [system + list(f"user {i}: question {i}\n".encode()) for i in range(count)]


def saved_entries(shares: bool, prompts_of=conversations, count: int = 3) -> list[list[int]]:
    engine, runtime = cached_engine(shares)
    run_turns(engine, prompts_of(runtime, count))
    return entry_tokens(engine)  # stopped: read on this thread


def entry_tokens(engine: Engine) -> list[list[int]]:
    return [prefix.tokens for prefix in engine.cached_prefixes()]


@pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])
def test_entries_come_back_in_their_recency_order_and_continue_a_conversation(shares: bool) -> None:
    entries = saved_entries(shares)
    engine, runtime = cached_engine(shares)
    prompts = conversations(runtime, 3)
    # Most recently used first: the last conversation's (its prompt, then its answer but the last token).
    assert len(entries) == 3 and entries[0][:len(prompts[2])] == prompts[2]

    async def body(e: Engine) -> tuple[list[int], list[int]]:
        assert [e.restore_prefix(entry, loader(runtime, entry)) for entry in entries] == [True] * 3
        assert entry_tokens(e) == entries  # restored most recent first, each ranked below the last
        next_turn = entries[1] + list(b" and then?\n")
        return await ask(e, next_turn), next_turn

    answer, next_turn = run_engine(engine, body)
    assert answer == runtime.greedy_reference(next_turn, 8)
    stats = engine.stats()
    assert stats.prefix_cache_hit_tokens_total == len(entries[1])
    assert stats.prefill_tokens_total == len(next_turn) - len(entries[1])  # only the new tokens computed
    check_physical_books(engine, runtime)


def test_on_shared_cells_a_common_system_prompt_comes_back_once() -> None:
    entries = saved_entries(True)
    engine, runtime = cached_engine(True)

    async def body(e: Engine) -> None:
        for entry in entries:
            assert e.restore_prefix(entry, loader(runtime, entry))

    run_engine(engine, body)
    shared = len(runtime.tokenizer.encode("You are terse. " * 8)) + len(b"user ")
    assert engine.stats().kv_cached_tokens == sum(len(e) for e in entries) - 2 * shared
    check_physical_books(engine, runtime)  # the slots' loaded copies of the shared part were freed


def test_restoring_evicts_nothing_and_skips_what_does_not_fit() -> None:
    entries = saved_entries(True, count=4)
    engine, runtime = cached_engine(True, cache_slots=2)

    async def body(e: Engine) -> list[bool]:
        return [e.restore_prefix(entry, loader(runtime, entry)) for entry in entries]

    assert run_engine(engine, body) == [True, True, False, False]  # two cache ids: the two most recent
    assert entry_tokens(engine) == entries[:2]
    small, runtime = cached_engine(True, capacity=len(entries[0]) - 1)

    async def too_big(e: Engine) -> bool:
        return e.restore_prefix(entries[0], loader(runtime, entries[0]))

    assert run_engine(small, too_big) is False and not runtime.cached_sequences()


def test_a_refused_load_leaves_nothing_behind() -> None:
    entries = saved_entries(True, count=1)
    engine, runtime = cached_engine(True)

    def refuse(slot: int) -> bool:
        loader(runtime, entries[0])(slot)  # a state whose tokens turned out wrong: loaded, then refused
        return False

    async def body(e: Engine) -> bool:
        return e.restore_prefix(entries[0], refuse)

    assert run_engine(engine, body) is False
    assert engine.stats().kv_cached_tokens == 0 and runtime.kv_cells_total == 0


def test_without_a_prefix_cache_there_is_nothing_to_list_or_restore() -> None:
    engine, runtime = cached_engine(True, prefix_cache=False)

    async def body(e: Engine) -> tuple[list[list[int]], bool]:
        await ask(e, list(b"hello there"))
        return e.cached_prefixes(), e.restore_prefix([1, 2, 3], loader(runtime, [1, 2, 3]))

    assert run_engine(engine, body) == ([], False)
