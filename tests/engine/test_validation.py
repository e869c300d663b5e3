"""Request validation: every bounded sampling parameter is read and checked by its own name."""

from __future__ import annotations

import dataclasses
import math

import pytest

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.validation import SAMPLING_RANGES, bounded_floats, validate_sampling
from edgeopt.errors import RequestError


def test_every_float_sampling_parameter_has_a_range_and_is_read_under_its_own_name() -> None:
    floats = {f.name for f in dataclasses.fields(SamplingParams) if f.type in ("float", float)}
    assert set(bounded_floats(SamplingParams())) == set(SAMPLING_RANGES) == floats
    marked = SamplingParams(**{name: float(i) for i, name in enumerate(sorted(floats))})
    assert bounded_floats(marked) == {name: float(i) for i, name in enumerate(sorted(floats))}


@pytest.mark.parametrize("name", sorted(SAMPLING_RANGES))
def test_a_nan_in_any_bounded_parameter_is_refused_naming_it(name: str) -> None:
    with pytest.raises(RequestError) as info:
        validate_sampling(dataclasses.replace(SamplingParams(), **{name: math.nan}), vocab_size=10)
    assert info.value.param == name and name in info.value.message
