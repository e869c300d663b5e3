"""`edgeopt optimize` writes nothing its own plan marks as not fitting unless --ignore-fit says so, and a
--size that cannot be meant (above the model in F16) is refused naming the bytes it likely meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.byte_sizes import read_size
from edgeopt.errors import ConfigError, DoesNotFitError
from edgeopt.optimize.pipeline import OptimizeOptions, resolve


def options(model: Path, tmp_path: Path, **kwargs) -> OptimizeOptions:
    return OptimizeOptions(model=str(model), target="raspberry-pi", output=tmp_path / "out", format="gguf", **kwargs)


def test_an_asked_quant_that_does_not_fit_is_refused_unless_ignore_fit(tiny_llama_dir: Path, tmp_path: Path) -> None:
    # 2,000,000 sequences of the model's full window do not fit a Raspberry Pi's 8 GB at any quant.
    unfit = options(tiny_llama_dir, tmp_path, quant="F16", concurrency=2_000_000)
    with pytest.raises(DoesNotFitError, match="as gguf:F16 does not fit raspberry-pi-5-8gb") as caught:
        resolve(unfit)
    assert "--ignore-fit" in caught.value.hint
    unfit.ignore_fit = True
    resolved = resolve(unfit)
    assert resolved.quant == "F16" and not next(c for c in resolved.plan.candidates if c.quant == "F16").fits
    unfit.ignore_fit, unfit.dry_run = False, True  # a dry run only shows the plan
    assert resolve(unfit).quant == "F16"


def test_a_bare_size_above_the_f16_model_is_refused_as_the_byte_count_it_likely_is(tiny_llama_dir: Path,
                                                                                   tmp_path: Path) -> None:
    size = read_size("200000", "--size")
    with pytest.raises(ConfigError, match=r"--size 200000 \(a bare number is MiB: 195\.3 GiB\) is larger than") as caught:
        resolve(options(tiny_llama_dir, tmp_path, size=size, export_options={"mix_size_bytes": size.bytes}))
    assert "write --size 200000B" in caught.value.hint
