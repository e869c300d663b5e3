"""How long a decode pass takes as a function of the tokens it carries, learned from the decode steps the
engine runs (with and without drafted tokens): t(n) = fixed + per_token * n.

On a CPU a decode step re-reads every weight once whatever it carries (the fixed part), and each token adds
its matrix products (the per-token part). Their ratio decides whether verifying k guessed tokens pays: on a
small model on two cores the per-token part is far from negligible, on a large model it nearly is. The fit is
a least-squares line over exponentially decayed sums, so it follows a host whose load changes; until the
steps have varied enough in size to fit a slope, the prior stands in: the ratio the engine measured on this
device at start (:mod:`edgeopt.engine.speculation.calibration`), else PRIOR_PER_TOKEN_RATIO. Where that
measurement timed several sizes, their curve (:class:`PassCurve`, corrected by the steps served) prices
each size instead of the line (:meth:`StepCostModel.relative`): a CPU's pass is no line.
"""

from __future__ import annotations

from edgeopt.engine.speculation.pass_curve import PassCurve

PRIOR_PER_TOKEN_RATIO = 0.15  # per-token cost / fixed cost before any fit (a ~100M-parameter model on a CPU)
DECAY = 0.99  # weight of past steps per new step (an effective window of ~100 steps)
MIN_SPREAD = 0.5  # variance of token counts needed before the fitted slope is trusted


class StepCostModel:
    def __init__(self) -> None:
        self._w = self._n = self._t = self._nn = self._nt = 0.0
        self._observed = 0  # steps observed
        self.prior_ratio = PRIOR_PER_TOKEN_RATIO
        self.prior_fixed_seconds: float | None = None
        self._curve: PassCurve | None = None  # set_prior's measured curve, corrected by the steps served

    def set_prior(self, fixed_seconds: float, ratio: float, curve: dict[int, float] | None = None) -> None:
        """What a measurement on this device found (a pass's fixed part, per-token / fixed), used until the
        steps served fit a line of their own; ``curve``: the pass's time at a few sizes (tokens -> seconds),
        whose shape then prices each size (:meth:`relative`) where no line does it justice."""
        self.prior_fixed_seconds, self.prior_ratio = fixed_seconds, ratio
        self._curve = PassCurve(curve) if curve and len(curve) >= 2 else None

    def relative(self, tokens: int) -> float:
        """A pass of ``tokens`` tokens, in any fixed unit: what decisions compare (the extra time k drafted
        tokens add to a step over the step's own). The pass curve where one was measured (PassCurve), else
        the line: 1 + ratio x tokens."""
        if self._curve is None:
            return 1.0 + self.per_token_ratio() * tokens
        return self._curve.seconds(tokens)

    def prices_version(self) -> tuple[int, int]:
        """Changes whenever :meth:`relative` may answer differently: prices computed from it stand until then."""
        if self._curve is None:
            return (0, self._observed)  # the line: every observed step moves it
        return (1, self._curve.version)

    def observe(self, tokens: int, seconds: float) -> None:
        self._observed += 1
        d = DECAY
        self._w = self._w * d + 1.0
        self._n = self._n * d + tokens
        self._t = self._t * d + seconds
        self._nn = self._nn * d + tokens * tokens
        self._nt = self._nt * d + tokens * seconds
        if self._curve is not None:
            self._curve.observe(tokens, seconds)

    def fixed_seconds(self) -> float | None:
        """The fixed part of a pass in seconds (mean time / (1 + ratio x mean tokens)); before any step the
        prior's (None when nothing was measured)."""
        if self._w < 1.0:
            return self.prior_fixed_seconds
        ratio = self.per_token_ratio()
        if ratio == float("inf"):
            return 0.0
        return (self._t / self._w) / (1.0 + ratio * self._n / self._w)

    def per_token_ratio(self) -> float:
        """per_token / fixed: the cost of one more token in a pass, in units of the pass's fixed cost."""
        if self._w < 1.0:
            return self.prior_ratio
        mean_n, mean_t = self._n / self._w, self._t / self._w
        spread = self._nn / self._w - mean_n * mean_n
        if spread < MIN_SPREAD:
            return self.prior_ratio
        slope = (self._nt / self._w - mean_n * mean_t) / spread
        fixed = mean_t - slope * mean_n
        if slope <= 0.0:
            return 0.0  # extra tokens cost nothing measurable
        if fixed <= 0.0:
            return float("inf")  # all of the pass is per-token work: speculation cannot pay
        return slope / fixed

