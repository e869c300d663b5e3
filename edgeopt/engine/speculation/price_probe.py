"""When the controller verifies a short draft that its prices say does not pay: so that a wrong price is found out.

The pass-cost curve (:mod:`edgeopt.engine.speculation.pass_curve`) learns a draft's price only from steps that
carry drafts. A curve timed at start beside a busy neighbour (another server loading, a build) prices drafted
tokens so high that no draft pays; then no step carries one, and the price is never corrected: started beside
llama-server, edgeopt decoded at 0.83-0.885x of it where, started alone, it decoded at 1.2-1.4x. So after a run of
steps that drafted nothing, one step verifies a short draft anyway; its time prices its size, and a few such
steps redraw the curve's shape. The runs between probes double up to MAX_INTERVAL steps: a probe costs about
what its tokens add to a pass (~0.6 of a step for a lone stream on a CPU, a few percent of a full batch's), so
once the price has been checked and still says no, probing costs under 0.5% of the decode.
"""

from __future__ import annotations

FIRST_INTERVAL = 8  # steps without a draft before the first probe
MAX_INTERVAL = 128  # ... and at most this many between two probes
PROBE_TOKENS = 2  # a probe's draft: the smallest that tells what tokens beyond the first add to a pass
# Only a sequence whose drafts are not known to fail is probed (a new one starts at 0.5): its probe may pay for
# itself, and where the text is free no price would make drafting pay anyway.
PROBE_ACCEPTANCE = 0.5


class PriceProbe:
    """Counts the steps that drafted nothing and says when the next one should verify a probe."""

    def __init__(self) -> None:
        self.interval = FIRST_INTERVAL
        self._undrafted = 0
        self.probes = 0  # probes verified since start (/metrics)

    def due(self) -> bool:
        """One more step drafted nothing: whether this one should probe (it stays due until one is made)."""
        self._undrafted += 1
        return self._undrafted >= self.interval

    def start_over(self) -> None:
        """A step verified a draft of its own: the run without drafts starts again."""
        self._undrafted = 0

    def probed(self, verified: bool) -> None:
        """A probe was due and was looked for (``verified``: one was found and verified). Either way the next waits
        twice as long: in free text a lookup every step while one stays due would undo the thinning of lookups."""
        self.probes += verified
        self._undrafted = 0
        self.interval = min(self.interval * 2, MAX_INTERVAL)
