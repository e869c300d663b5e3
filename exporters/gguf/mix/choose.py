"""Choose one type per tensor so the file fits a byte budget at the lowest predicted quality cost.

Each tensor offers options (type, bytes, predicted cost); the costs are additive across tensors (small
perturbations of different weights add up in KL to first order). That is a multiple-choice knapsack,
solved exactly by dynamic programming over the budget cut into ``_SLOTS`` equal units (a tensor's bytes
rounded up to whole units, so the choice always fits); what the rounding leaves unspent then buys the
best single upgrades that still fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.errors import ConfigError

_SLOTS = 1 << 15  # budget resolution: a 100 MiB budget in units of 3.2 KB


@dataclass(frozen=True)
class Option:
    type: str
    bytes: int
    cost: float  # predicted KL contribution (any unit shared by all tensors)


@dataclass(frozen=True)
class Choice:
    types: dict[str, str]  # tensor name -> chosen type
    bytes: int
    cost: float


def choose_types(options: dict[str, list[Option]], budget_bytes: int) -> Choice:
    """The lowest-cost choice whose bytes stay within ``budget_bytes``; refused when even the smallest option
    of every tensor does not fit."""
    names = sorted(name for name, opts in options.items() if opts)
    smallest = sum(min(o.bytes for o in options[name]) for name in names)
    if smallest > budget_bytes:
        raise ConfigError(f"the smallest type of every tensor takes {smallest / 2**20:.1f} MiB of tensor data, more "
                          f"than the {budget_bytes / 2**20:.1f} MiB the size leaves for it",
                          f"give a --size of at least {smallest / 2**20 * 1.01 + 1:.0f}MiB, or prune the model (--prune)")
    picked = _knapsack([options[name] for name in names], budget_bytes)
    if picked is None:  # rounding to units made the smallest choice overflow: take it, then fill
        picked = [min(range(len(options[n])), key=lambda k, n=n: options[n][k].bytes) for n in names]
    level = dict(zip(names, picked))
    _fill(options, level, budget_bytes)
    chosen = {name: options[name][level[name]] for name in names}
    return Choice(types={name: o.type for name, o in chosen.items()}, bytes=sum(o.bytes for o in chosen.values()),
                  cost=sum(o.cost for o in chosen.values()))


def _knapsack(per_tensor: list[list[Option]], budget_bytes: int) -> list[int] | None:
    """Index of each tensor's option in the cheapest choice within the budget (in rounded-up units)."""
    unit = max(1, -(-budget_bytes // _SLOTS))
    slots = budget_bytes // unit
    best = np.full(slots + 1, np.inf)  # best[u]: lowest cost of the tensors so far in at most u units
    best[:] = 0.0
    picks = np.zeros((len(per_tensor), slots + 1), dtype=np.int16)
    for i, opts in enumerate(per_tensor):
        after = np.full(slots + 1, np.inf)
        for k, option in enumerate(opts):
            units = -(-option.bytes // unit)
            if units > slots:
                continue
            candidate = np.full(slots + 1, np.inf)
            candidate[units:] = best[:slots + 1 - units] + option.cost
            better = candidate < after
            after[better] = candidate[better]
            picks[i, better] = k
        best = after
    if not np.isfinite(best[slots]):
        return None
    chosen, left = [], slots
    for i in range(len(per_tensor) - 1, -1, -1):  # walk back from the full budget
        k = int(picks[i, left])
        chosen.append(k)
        left -= -(-per_tensor[i][k].bytes // unit)
    return chosen[::-1]


def _fill(options: dict[str, list[Option]], level: dict[str, int], budget_bytes: int) -> None:
    """Spend what is left on single upgrades, the largest cost saving first, while one fits."""
    used = sum(options[name][k].bytes for name, k in level.items())
    while True:
        best: tuple[float, str, int] | None = None
        for name, k in level.items():
            now = options[name][k]
            for j, option in enumerate(options[name]):
                saved = now.cost - option.cost
                if saved > 0 and used + option.bytes - now.bytes <= budget_bytes and (best is None or saved > best[0]):
                    best = (saved, name, j)
        if best is None:
            return
        _, name, j = best
        used += options[name][j].bytes - options[name][level[name]].bytes
        level[name] = j
