"""The budgeted type choice of a GGUF mix (exporters/gguf/mix/choose.py): pure arithmetic, checked against
exhaustive search on small cases."""

from __future__ import annotations

import itertools
import random

import pytest

from edgeopt.errors import ConfigError
from edgeopt.exporters.gguf.mix.choose import Option, choose_types


def options(costs: dict[str, float], sizes: dict[str, int]) -> list[Option]:
    return [Option(t, sizes[t], cost) for t, cost in costs.items()]


SIZES = {"low": 45, "mid": 55, "high": 85}


def test_the_sensitive_tensor_gets_the_bits_and_the_budget_holds() -> None:
    tensors = {
        "insensitive": options({"low": 1.0, "mid": 0.5, "high": 0.1}, SIZES),
        "sensitive": options({"low": 100.0, "mid": 40.0, "high": 5.0}, SIZES),
    }
    choice = choose_types(tensors, budget_bytes=45 + 85)
    assert choice.types == {"insensitive": "low", "sensitive": "high"}
    assert choice.bytes == 130 and choice.cost == pytest.approx(6.0)


def test_a_bigger_option_that_is_no_better_is_never_bought() -> None:
    tensors = {"t": [Option("low", 45, 1.0), Option("waste", 60, 1.0), Option("high", 85, 0.1)]}
    assert choose_types(tensors, budget_bytes=70).types == {"t": "low"}
    assert choose_types(tensors, budget_bytes=85).types == {"t": "high"}


def test_a_budget_below_the_smallest_types_is_refused_with_the_size_that_would_do() -> None:
    tensors = {"a": options({"low": 1.0, "high": 0.0}, SIZES), "b": options({"low": 1.0, "high": 0.0}, SIZES)}
    with pytest.raises(ConfigError) as err:
        choose_types(tensors, budget_bytes=80)
    assert "--size" in err.value.hint


@pytest.mark.parametrize("seed", range(20))
def test_the_exhaustive_optimum(seed: int) -> None:
    """Random costs over 5 tensors x 4 types: the choice is the best that fits (exhaustive search), never over
    the budget (budgets this small are exact: one byte a unit)."""
    rng = random.Random(seed)
    sizes = {"a": 40, "b": 50, "c": 60, "d": 90}
    tensors = {}
    for i in range(5):
        scale = rng.uniform(0.1, 10.0)
        tensors[f"t{i}"] = [Option(t, size * (i + 1), scale * 2.0 ** -(size / 10.0) * rng.uniform(0.8, 1.2))
                            for t, size in sizes.items()]
    smallest = sum(min(o.bytes for o in opts) for opts in tensors.values())
    largest = sum(max(o.bytes for o in opts) for opts in tensors.values())
    budget = rng.randint(smallest, largest)
    choice = choose_types(tensors, budget)
    best = min(sum(o.cost for o in combo) for combo in itertools.product(*tensors.values())
               if sum(o.bytes for o in combo) <= budget)
    assert choice.bytes <= budget
    assert choice.cost == pytest.approx(best, rel=1e-9)
