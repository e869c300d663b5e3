"""The prefix cache per tenant (issue 61): a request borrows cached KV only from its own cache namespace (its
caller's, edgeopt.server.http.callers) and the operator's, never from another tenant's: not from a finished
request's entry, not from a sequence still running, not from an entry that came back from disk. On the fake
runtime, whose KV cells have identities, so a borrowed prefix is seen in the books (cached tokens, prefill
tokens) and in the answers (the same greedy tokens as computing them)."""

from __future__ import annotations

import asyncio

import pytest

from edgeopt.engine import Engine, SamplingParams
from edgeopt.engine.api import RequestOutput
from edgeopt.engine.kv_cells import KvCells
from edgeopt.engine.prefix_cache_modes import CopiedCellsCache, SharedCellsCache
from edgeopt.engine.prefix_tree import OPERATOR_NAMESPACE, SHARED_NAMESPACE
from edgeopt.engine.running_prefix import waits_for_running_prefix
from edgeopt.engine.sequence import Sequence
from tests.engine.helpers import run_engine
from tests.engine.test_prefix_cache import GREEDY, RecordingStorage, cached_engine, check_physical_books
from tests.engine.test_prefix_restore import loader

ALICE, BOB = "caller:alice", "caller:bob"
MODES = pytest.mark.parametrize("shares", [True, False], ids=["shared-cells", "copied-cells"])


def long_prompt(engine: Engine, question: str = "what is the secret?") -> list[int]:
    return engine.runtime.tokenizer.encode("My secret plan is to buy the old mill. " * 10 + question)


async def ask_as(engine: Engine, namespace: str, prompt: list[int], params: SamplingParams = GREEDY) -> RequestOutput:
    ask_as.count = getattr(ask_as, "count", 0) + 1  # type: ignore[attr-defined]
    stream = engine.add_request(f"tenant-{ask_as.count}", prompt, params, cache_namespace=namespace)  # type: ignore[attr-defined]
    return await stream.collect()


@MODES
def test_another_tenant_computes_the_same_prompt_afresh_and_the_first_still_hits(shares: bool) -> None:
    engine, runtime = cached_engine(shares)
    prompt = long_prompt(engine)

    async def body(e: Engine) -> list[tuple[RequestOutput, int]]:
        outputs = []
        for namespace in (ALICE, BOB, ALICE, BOB):
            before = e.stats().prefill_tokens_total
            out = await ask_as(e, namespace, prompt)
            outputs.append((out, e.stats().prefill_tokens_total - before))
        return outputs

    (alice1, computed1), (bob1, computed2), (alice2, computed3), (bob2, computed4) = run_engine(engine, body)
    assert alice1.cached_tokens == 0 and computed1 == len(prompt)
    assert bob1.cached_tokens == 0 and computed2 == len(prompt)  # a fresh prefill: alice's entry is not bob's
    assert alice2.cached_tokens == len(prompt) - 1 and computed3 == 1  # each tenant's repeat hits its own entry
    assert bob2.cached_tokens == len(prompt) - 1 and computed4 == 1
    reference = runtime.greedy_reference(prompt, 8)
    assert [o.token_ids for o in (alice1, bob1, alice2, bob2)] == [reference] * 4
    assert not runtime.violations


@MODES
def test_without_namespaces_every_request_shares_the_cache_as_before(shares: bool) -> None:
    engine, runtime = cached_engine(shares)
    prompt = long_prompt(engine)

    async def body(e: Engine) -> list[RequestOutput]:
        return [await ask_as(e, SHARED_NAMESPACE, prompt) for _ in range(2)]

    first, second = run_engine(engine, body)
    assert first.cached_tokens == 0 and second.cached_tokens == len(prompt) - 1
    check_physical_books(engine, runtime)


def test_a_tenant_neither_waits_for_nor_borrows_another_tenant_s_running_prefix() -> None:
    """A prompt sharing a long prefix with a running sequence waits for it and borrows it (running_prefix.py);
    another tenant's running sequence must not be waited for (the delay would tell what it sends) nor lent."""
    cells = KvCells(4096, 4, lambda slot: None, SharedCellsCache(RenamingStorage(), range(10, 14)))
    prefix = list(range(1, 200))
    owner = Sequence("alice-1", prefix + [7], GREEDY, cache_namespace=ALICE)
    owner.slot, owner.num_computed = 0, 64  # still computing the shared prefix
    same_tenant = Sequence("alice-2", prefix + [8], GREEDY, cache_namespace=ALICE)
    other_tenant = Sequence("bob-1", prefix + [8], GREEDY, cache_namespace=BOB)
    assert waits_for_running_prefix(same_tenant, [owner], cells)
    assert not waits_for_running_prefix(other_tenant, [owner], cells)


def test_a_tenant_running_beside_another_on_the_same_prefix_computes_it_and_answers_alike() -> None:
    engine, runtime = cached_engine(True, step_delay_s=0.01, prefill_chunk=16, step_token_budget=16)
    prompt, other_question = long_prompt(engine), long_prompt(engine, "where is it?")
    slow = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)

    async def body(e: Engine) -> list[RequestOutput]:
        alice = asyncio.ensure_future(ask_as(e, ALICE, prompt, slow))
        await asyncio.sleep(0.05)  # alice is prefilling, 16 tokens a step
        later = [asyncio.ensure_future(ask_as(e, namespace, other_question)) for namespace in (BOB, ALICE)]
        return [await alice, *[await request for request in later]]

    alice, bob, alice_again = run_engine(engine, body)
    assert alice.cached_tokens == 0 and bob.cached_tokens == 0
    assert alice_again.cached_tokens >= len(long_prompt(engine, "")) - 1  # alice's own next prompt borrows hers
    assert bob.token_ids == runtime.greedy_reference(other_question, 8)
    assert not runtime.violations


@MODES
def test_every_tenant_reads_the_operator_s_entry_but_not_what_another_tenant_parked_on_it(shares: bool) -> None:
    engine, runtime = cached_engine(shares)
    system = long_prompt(engine, "")
    alice_prompt, bob_prompt = system + list(b"alice: my pin is 1234"), system + list(b"alice: my pin is 9999")

    async def body(e: Engine) -> list[RequestOutput]:
        warm = SamplingParams(max_tokens=1, temperature=0.0)  # as serve --warm computes it, on a server with keys
        await ask_as(e, OPERATOR_NAMESPACE, system, warm)
        return [await ask_as(e, ALICE, alice_prompt), await ask_as(e, BOB, bob_prompt)]

    alice, bob = run_engine(engine, body)
    assert alice.cached_tokens == len(system)  # the operator's entry
    assert bob.cached_tokens == len(system)  # not the longer "alice: my pin is " alice's entry holds
    assert bob.token_ids == runtime.greedy_reference(bob_prompt, 8)
    assert not runtime.violations


@MODES
def test_entries_leave_and_come_back_with_their_namespace(shares: bool) -> None:
    """A swapped-out model's entries (edgeopt.server.models.swap_space) return to their own tenant only."""
    engine, _ = cached_engine(shares)
    prompt = long_prompt(engine)
    run_engine(engine, lambda e: ask_as(e, ALICE, prompt))
    saved = engine.cached_prefixes()
    assert [prefix.namespace for prefix in saved] == [ALICE]
    restored, runtime = cached_engine(shares)

    async def body(e: Engine) -> list[RequestOutput]:
        assert e.restore_prefix(saved[0].tokens, loader(runtime, saved[0].tokens), saved[0].namespace)
        return [await ask_as(e, BOB, prompt), await ask_as(e, ALICE, prompt)]

    bob, alice = run_engine(restored, body)
    assert bob.cached_tokens == 0 and alice.cached_tokens == len(prompt) - 1


class RenamingStorage(RecordingStorage):
    """Also renames a sequence, as the copied-cells cache does when a finished sequence becomes an entry."""

    def move_kv(self, source: int, target: int) -> None:
        self.sequences[target] = self.sequences.pop(source)


@pytest.mark.parametrize("cache_type", [SharedCellsCache, CopiedCellsCache])
def test_the_cache_lends_a_namespace_only_its_own_and_the_operator_s_entries(cache_type: type) -> None:
    storage = RenamingStorage()
    cache = cache_type(storage, range(10, 14))

    def park(tokens: list[int], namespace: str) -> None:
        storage.sequences[0] = list(tokens)  # slot 0 computed them
        assert cache.park(0, tokens, namespace)
        storage.release(0)

    park([1, 2, 3, 4, 5, 6], ALICE)
    park([1, 2, 3], OPERATOR_NAMESPACE)
    assert cache.preview([1, 2, 3, 4, 5, 6, 7], 6, ALICE).lent == 6
    assert cache.preview([1, 2, 3, 4, 5, 6, 7], 6, BOB).lent == 3  # the operator's [1, 2, 3] only
    assert cache.preview([1, 2, 3, 4, 5, 6, 7], 6, SHARED_NAMESPACE).lent == 3
    assert cache.entry_holding([1, 2, 3, 4, 5, 6], BOB) is None
    assert cache.entry_holding([1, 2, 3, 4, 5, 6], ALICE) is not None
    assert sorted((p.namespace, tuple(p.tokens)) for p in cache.entry_paths()) == [
        (ALICE, (1, 2, 3, 4, 5, 6)), (OPERATOR_NAMESPACE, (1, 2, 3))]
