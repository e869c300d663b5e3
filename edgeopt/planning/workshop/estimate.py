"""What the optimize's own plan says: each step's peak resident memory (the process's own, anonymous, and the
model files it maps) and expected seconds on this workstation, and the refusal when the workstation cannot
hold a step."""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import ConfigError

GIB = 2**30


@dataclass(frozen=True)
class StepEstimate:
    name: str
    # The step's peak resident set as the kernel counts it (``/usr/bin/time -f %M``, VmHWM): its own memory and the
    # model files it maps (page cache: read again from disk when the kernel needs the memory, never fatal).
    resident_bytes: int
    anonymous_bytes: int  # the process's own memory at its peak: what must fit in free RAM
    seconds: float


@dataclass(frozen=True)
class WorkshopPlan:
    steps: tuple[StepEstimate, ...]
    not_planned: tuple[str, ...] = ()  # steps run but not estimated (the ONNX export), named in the lines

    @property
    def peak(self) -> StepEstimate | None:
        """The step with the largest resident set (None: no step is planned)."""
        return max(self.steps, key=lambda step: step.resident_bytes, default=None)

    @property
    def largest_own(self) -> StepEstimate | None:
        """The step that needs the most memory of its own (what must fit in free RAM)."""
        return max(self.steps, key=lambda step: step.anonymous_bytes, default=None)

    @property
    def peak_resident_bytes(self) -> int:
        return self.peak.resident_bytes if self.peak else 0

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    def lines(self) -> list[str]:
        tail = [f"  not planned: {', '.join(self.not_planned)}"] if self.not_planned else []
        peak, own = self.peak, self.largest_own
        if peak is None or own is None:
            return ["workshop: no step planned", *tail]
        rows = [f"  {step.name:<28s} {step.resident_bytes / GIB:6.2f} GiB ({step.anonymous_bytes / GIB:5.2f} own)"
                f"  ~{_duration(step.seconds)}" for step in self.steps]
        return [f"workshop: peak {peak.resident_bytes / GIB:.2f} GiB resident ({peak.name}), of which at most "
                f"{own.anonymous_bytes / GIB:.2f} GiB the process's own ({own.name}), the rest mapped model files; "
                f"about {_duration(self.seconds)} on this machine", *rows, *tail]

    def refuse_beyond(self, available_bytes: int, fixes: list[str]) -> None:
        """Refuse before any work when a step's own memory exceeds what the machine has free: it would be
        killed, or swap, part way. Mapped files past it are only read again from disk (slower, not fatal)."""
        worst = self.largest_own
        if worst is not None and worst.anonymous_bytes > available_bytes:
            raise ConfigError(
                f"this workstation has {available_bytes / GIB:.1f} GiB free; the optimize's {worst.name} step needs "
                f"{worst.anonymous_bytes / GIB:.1f} GiB of its own (and maps model files beside it: "
                f"{worst.resident_bytes / GIB:.1f} GiB resident)",
                "; or ".join(fixes + ["run it on a machine with more free memory"]))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.0f} min"
