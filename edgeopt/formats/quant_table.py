"""A format's quant table: every quant it writes, the weight bit width each is named for, and what the planner,
the quality floor and ``optimize --quant``'s help read of them.

The bit width is declared, never read from a name: ExecuTorch's ``8da4w`` (8-bit dynamic activations, 4-bit
weights) is a 4-bit quant for the quality floor, whatever digit its name starts with.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import ConfigError


@dataclass(frozen=True)
class Quant:
    name: str  # the format's canonical spelling (the bundle's `quant`)
    # Bits per weight the quant is made at (Q4_K_M: 4, int8: 8, bf16: 16); None for a mix with no single width
    # (gguf MIX), which the quality floor holds to its top-1 limit only.
    weight_bits: int | None
    # What loses less when a bundle of this quant is under the quality floor; "" for the table's lower_bits_remedy.
    remedy: str = ""


@dataclass(frozen=True)
class QuantTable:
    quants: tuple[Quant, ...]
    candidates: tuple[str, ...] = ()  # what the planner sizes when no quant is asked for
    encoder_candidates: tuple[str, ...] = ()  # the same for encoders; () when the format serves causal LMs only
    # "module:function": (DeviceProfile) -> candidates, when they depend on the device (then used instead of
    # candidates); "" when fixed.
    device_candidates: str = ""
    # "module:function": (ModelSpec, quant) -> weight bytes, pure Python (the planner calls it before any export).
    size_estimate: str = ""
    # The quant that picks each tensor's type to fit a file size (plan/optimize --size); "" when none.
    sized: str = ""
    help_examples: tuple[str, ...] = ()  # the quants `optimize --quant`'s help names for this format
    # The quality floor's advice for a quant of fewer than 16 bits with no remedy of its own.
    lower_bits_remedy: str = ""

    def __post_init__(self) -> None:
        named = {*self.candidates, *self.encoder_candidates, *self.help_examples, *([self.sized] if self.sized else [])}
        unknown = sorted(named - set(self.names))
        if unknown:
            raise ConfigError(f"a quant table names quants it does not list: {', '.join(unknown)}",
                              f"list them among its quants ({', '.join(self.names)})")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(quant.name for quant in self.quants)

    def find(self, name: str) -> Quant | None:
        """The quant spelled ``name`` in any case; None when the format has no such quant."""
        folded = name.strip().casefold()
        return next((quant for quant in self.quants if quant.name.casefold() == folded), None)

    def weight_bits(self, name: str) -> int | None:
        quant = self.find(name)
        return quant.weight_bits if quant else None


def quants_of_width(bits: int | None, *names: str) -> tuple[Quant, ...]:
    """Several quants of one weight bit width, to keep a long table readable."""
    return tuple(Quant(name, bits) for name in names)
