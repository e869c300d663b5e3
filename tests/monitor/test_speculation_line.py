"""The monitor's totals line shows speculative decoding's acceptance once a guess was verified."""

from __future__ import annotations

from edgeopt.monitor.widgets import ThroughputPanel
from edgeopt.monitor.window import Figures


def test_acceptance_appears_once_speculation_verified_a_guess() -> None:
    plain = ThroughputPanel._totals_line(Figures(requests_total=3, errors_total=0, preemptions_total=0))
    assert "spec" not in plain
    line = ThroughputPanel._totals_line(Figures(requests_total=3, errors_total=0, preemptions_total=0,
                                                speculative_drafted_total=80, speculative_accepted_total=60))
    assert line.startswith(plain) and line.endswith("spec accepted 75%")
