"""Scheduler: decode first, prefill chunks within the budget, FIFO admission, preemption bookkeeping; and
applying a step's picks (append, stop checks, retire and free)."""

from __future__ import annotations

import asyncio

from edgeopt.engine.api import EngineConfig, RequestOutput, SamplingParams
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.scheduled import Pick
from edgeopt.engine.scheduler import Scheduler
from edgeopt.engine.sequence import Sequence, SequenceState
from tests.fixtures.fake_runtime import EOS_ID, ByteTokenizer


def make(capacity: int = 100, running: int = 4, budget: int = 16, chunk: int = 8,
         requests: RequestRegistry | None = None) -> tuple[Scheduler, list[int]]:
    released: list[int] = []
    config = EngineConfig(kv_capacity_tokens=capacity, max_running=running, step_token_budget=budget,
                          prefill_chunk=chunk)
    if requests is None:  # (an empty registry is falsy: it has a length)
        requests = RequestRegistry(ByteTokenizer(), frozenset({EOS_ID}))
    return Scheduler(config, released.append, requests, context_tokens=capacity), released


def run_step(s: Scheduler) -> list[tuple[str, int, int, bool]]:
    out = s.schedule()
    s.mark_computed(out.chunks)
    for c in out.chunks:
        if c.want_logits:
            c.seq.output_ids.append(1)
    return [(c.seq.request_id, len(c.tokens), c.start_pos, c.want_logits) for c in out.chunks]


def test_prefill_is_chunked_and_decodes_go_first() -> None:
    s, _ = make()
    s.add(Sequence("a", list(range(20)), SamplingParams()))
    assert run_step(s) == [("a", 16, 0, False)]  # nothing decodes: a prompt alone takes the whole budget
    s.add(Sequence("b", list(range(5)), SamplingParams()))
    assert run_step(s) == [("a", 4, 16, True), ("b", 5, 0, True)]
    s.add(Sequence("c", list(range(20)), SamplingParams()))
    # Decodes go first, and a step that decodes caps each prompt's slice at prefill_chunk (8).
    assert run_step(s) == [("a", 1, 20, True), ("b", 1, 5, True), ("c", 8, 0, False)]
    assert run_step(s) == [("a", 1, 21, True), ("b", 1, 6, True), ("c", 8, 8, False)]
    assert s.kv.used == (20 + 2) + (5 + 2) + 16  # prompt cells plus one per decode fed


def test_admission_waits_for_kv_room_in_fifo_order() -> None:
    s, _ = make(capacity=30, budget=64, chunk=64)
    s.add(Sequence("big", list(range(25)), SamplingParams()))
    s.add(Sequence("next", list(range(10)), SamplingParams()))
    s.add(Sequence("tiny", [1], SamplingParams()))
    assert [r for r, *_ in run_step(s)] == ["big"]  # "next" does not fit; "tiny" may not jump the queue
    assert [x.request_id for x in s.waiting] == ["next", "tiny"]


def test_preemption_takes_the_newest_and_releases_its_slot() -> None:
    s, released = make(capacity=12, budget=64, chunk=64)
    s.add(Sequence("old", list(range(5)), SamplingParams()))
    s.add(Sequence("new", list(range(5)), SamplingParams()))
    run_step(s)  # both prefilled: 10 cells
    run_step(s)  # both decode: 12 cells
    steps = run_step(s)  # "old" needs a cell: "new" is preempted
    assert steps == [("old", 1, 6, True)]
    new = s.waiting[0]
    assert new.request_id == "new" and new.state is SequenceState.PREEMPTED and new.num_computed == 0
    assert released == [1] and s.preemptions_total == 1 and s.kv.used == 7
    assert new.num_pending == 7  # prompt + both sampled tokens get recomputed


def test_finish_frees_kv_and_slot() -> None:
    s, released = make()
    seq = Sequence("a", [1, 2, 3], SamplingParams())
    s.add(seq)
    run_step(s)
    s.finish(seq, SequenceState.FINISHED, "stop")
    assert s.kv.used == 0 and released == [0] and s.slots.available == 4 and not s.has_work


def test_update_from_output_appends_checks_stops_and_frees_what_ended() -> None:
    """Three sampling sequences in one step: one takes a token and goes on, one takes its end token (retired,
    its slot released), one whose pick failed ends with "error" alone; their outputs reach their streams."""

    async def body() -> dict[str, list[RequestOutput]]:
        requests = RequestRegistry(ByteTokenizer(), frozenset({EOS_ID}))
        s, released = make(requests=requests)
        streams = {}
        for rid in ("goes-on", "ends", "fails"):
            tracker = requests.open(rid, [72, 105], SamplingParams(max_tokens=4), on_close=lambda _: None)
            streams[rid] = tracker.stream
            s.add(tracker.seq)
        out = s.schedule()
        assert [seq.request_id for seq in out.sampled] == ["goes-on", "ends", "fails"]
        s.update_from_output(out, [Pick(ord("!")), Pick(EOS_ID), RuntimeError("row 3 broke")])
        assert [seq.request_id for seq in s.running] == ["goes-on"] and sorted(released) == [1, 2]
        assert s.kv.used == 2 and out.sampled[0].num_computed == 2 and out.sampled[0].output_ids == [ord("!")]
        requests.flush(hold=False)
        await asyncio.sleep(0)
        outputs = {}
        for rid, stream in streams.items():  # Python 3.10 has no async comprehension inside a dict comprehension
            outputs[rid] = [o async for o in stream] if rid != "goes-on" else [await stream.__anext__()]
        return outputs

    outs = asyncio.run(body())
    assert outs["goes-on"][0].text == "!" and not outs["goes-on"][0].finished
    assert outs["ends"][-1].finish_reason == "stop" and outs["ends"][-1].token_ids == [EOS_ID]
    assert outs["fails"][-1].finish_reason == "error" and "RuntimeError: row 3 broke" in (outs["fails"][-1].error or "")


def test_abandon_ends_every_request_it_was_given_even_with_broken_queues() -> None:
    async def body() -> list[RequestOutput]:
        requests = RequestRegistry(ByteTokenizer(), frozenset({EOS_ID}))
        s, _ = make(requests=requests)
        trackers = [requests.open(rid, [1, 2], SamplingParams(), on_close=lambda _: None) for rid in "ab"]
        for tracker in trackers:
            s.add(tracker.seq)
        s.schedule()
        s.running.clear()  # the bookkeeping an engine bug left behind: nothing in the queues any more
        s.abandon("AssertionError: broken")
        requests.flush(hold=False)
        return [await tracker.stream.collect() for tracker in trackers]

    outs = asyncio.run(body())
    assert [o.finish_reason for o in outs] == ["error", "error"] and all(o.error == "AssertionError: broken" for o in outs)
