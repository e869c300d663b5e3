"""How many CPU threads llama.cpp decodes with when the user did not say: as many as other processes leave free.

llama.cpp's CPU backend (this build: OpenMP) makes its threads meet at a barrier after every operation
of the graph, and a thread waiting there spins. When another process holds one of the cores, the
thread that was descheduled holds up every barrier while the others spin: on a 2-core machine with one
busy neighbour a 20-token completion took 6.3 s with 2 threads and 0.1 s with 1. Fewer threads than
cores loses a little speed on an idle machine; more threads than free cores loses an order of
magnitude. So the default follows the load: :class:`ThreadGovernor` measures, every
``INTERVAL_S`` while decoding, how many of our cores other processes kept busy, and gives llama.cpp
(``llama_set_n_threads``, which takes effect at the next decode) the cores they left, at least one.
An explicit ``--threads N`` is used as given.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from edgeopt.profiles.host import OtherCpuLoad

log = logging.getLogger("edgeopt.runtime")
INTERVAL_S = 0.5
# The first reading is taken at creation, over a short pause, so that the first request already runs
# with the right count; 50 ms is 5 of /proc/stat's 10 ms ticks per core, enough to tell busy from idle.
PROBE_S = 0.05
# A core counts as taken once others keep it busy a quarter of the time: sharing a core with a
# neighbour that wants even a fraction of it already stalls every barrier now and then.
TAKEN_FRACTION = 0.25


def threads_for(max_threads: int, others_busy: float) -> int:
    """The cores others leave free (a core is taken from TAKEN_FRACTION of its time), between 1 and max."""
    taken = max(0, math.ceil(others_busy - TAKEN_FRACTION))
    return max(1, min(max_threads, max_threads - taken))


class ThreadGovernor:
    """Calls ``apply(n)`` whenever the thread count that the measured load calls for changes."""

    def __init__(self, apply: Callable[[int], None], max_threads: int, load: OtherCpuLoad | None = None,
                 interval_s: float = INTERVAL_S, probe_s: float = PROBE_S) -> None:
        self.max_threads = max_threads
        self.threads = max_threads
        self._apply = apply
        self._load = load or OtherCpuLoad()
        self._interval_s = interval_s
        time.sleep(probe_s)
        self._adjust(time.monotonic())

    def before_decode(self) -> None:
        """Cheap unless an interval has passed: one clock read per decode."""
        now = time.monotonic()
        if now - self._last >= self._interval_s:
            self._adjust(now)

    def _adjust(self, now: float) -> None:
        self._last = now
        others = self._load.read()
        if others is None:
            return
        wanted = threads_for(self.max_threads, others)
        if wanted != self.threads:
            log.info("llama.cpp threads %d -> %d: other processes keep %.1f of %d cores busy", self.threads,
                     wanted, others, self.max_threads)
            self.threads = wanted
            self._apply(wanted)
