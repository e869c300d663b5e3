"""The quants a format knows, in its own spelling (the backend's table), and a quant name given in any case
read as one of them."""

from __future__ import annotations

from edgeopt import backends
from edgeopt.errors import ConfigError


def format_quants(fmt: str) -> tuple[str, ...]:
    """Every quant name ``fmt`` knows, in its canonical spelling (the backend's own table)."""
    return backends.backend(fmt).quants.names


def canonical_quant(fmt: str, quant: str) -> str:
    """The format's own spelling of a quant name given in any case (``q4_k_m`` -> ``Q4_K_M``, ``INT8`` ->
    ``int8``), as llama-quantize and Ollama accept it; an unknown name is refused with the valid ones."""
    known = format_quants(fmt)
    by_folded_name = {name.casefold(): name for name in known}
    canonical = by_folded_name.get(quant.strip().casefold())
    if canonical is None:
        raise ConfigError(f"unknown {fmt} quant {quant!r}", f"valid (any case): {', '.join(known)}")
    return canonical
