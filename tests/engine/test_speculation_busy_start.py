"""An engine started beside a busy neighbour (a real CPU-burning process) drafts once the neighbour is gone: the
start-up pass curve, timed while it ran, priced every draft out; the price probe finds the price wrong and the
served steps redraw it (issue 61: started beside llama-server loading, auto decoded at 0.83x of it)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

from edgeopt.engine import Engine, SamplingParams
from edgeopt.engine.speculation.price_probe import PROBE_TOKENS
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import BOS_ID
from tests.fixtures.speculation_runtimes import CopyingRuntime

DOCUMENT = ("The invoice 4471 from Acme Tools lists twelve hammers at 9.50 each, shipped to Berlin on May 3. "
            "Payment is due within thirty days; late payment adds two percent. Contact: ops@acme.example. ")


class NeighbourRuntime(CopyingRuntime):
    """A pass's time as llama.cpp's on a CPU: while the neighbour process runs, each token stalls the threads at
    their barriers (20 ms a token, so a draft costs nearly a pass a token); once it is gone a token adds 2 ms to a
    5 ms pass. Sleeps, not work: the timings hold on a loaded 2-core box, where the busy loop takes a core."""

    def __init__(self, neighbour: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self.neighbour = neighbour
        self.calibrated = threading.Event()  # the start-up timing releases its slot when done

    def step(self, batch):  # type: ignore[no-untyped-def]
        tokens = min(sum(len(item.tokens) for item in batch), 12)  # (a prompt's chunk: as long as 12 tokens)
        busy = self.neighbour.poll() is None
        time.sleep(0.002 + 0.020 * tokens if busy else 0.005 + 0.002 * tokens)
        return super().step(batch)

    def release(self, slot: int) -> None:
        super().release(slot)
        self.calibrated.set()


def test_an_engine_timed_beside_a_busy_neighbour_drafts_once_it_is_gone() -> None:
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        runtime = NeighbourRuntime(neighbour)
        engine, _ = make_engine(runtime, speculative="auto")
        shapes: list[float] = []

        async def body(e: Engine) -> None:
            assert await asyncio.to_thread(runtime.calibrated.wait, 30)
            neighbour.kill()
            neighbour.wait()
            shapes.append(price_of_two_drafted(e))
            prompt = [BOS_ID, *f"{DOCUMENT}\nRepeat it: {DOCUMENT[:20]}".encode()]
            out = await e.add_request("r", prompt, SamplingParams(max_tokens=240, temperature=0.0)).collect()
            assert out.finish_reason == "length"
            shapes.append(price_of_two_drafted(e))

        run_engine(engine, body)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert not runtime.violations
    at_start, after = shapes
    assert at_start > 2.4  # timed beside the busy loop: 62 / 22 ms
    assert after < 2.0  # served: about 11 / 7 ms plus the step's own Python
    stats = engine.stats()
    probes = engine._speculation.controller.price_probe.probes
    assert probes >= 1
    assert stats.speculative_drafted_total["ngram"] > PROBE_TOKENS * probes  # drafts of its own, not only probes


def price_of_two_drafted(engine: Engine) -> float:
    """A pass of 3 tokens (a lone stream with 2 drafted) over one of 1, as the controller prices it now."""
    cost = engine._speculation.controller.cost
    return cost.relative(3) / cost.relative(1)
