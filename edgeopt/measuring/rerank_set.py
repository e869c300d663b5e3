"""The ranking set a rerank bundle is measured on, and what its scores are compared by (numpy only).

What a reranker's user cares about is the order it puts a query's candidates in, so besides the
largest score error the comparison reports, per query, the Spearman correlation of the two orders and
whether both put the same document first. Each built-in query has one relevant candidate (the first)
among near misses on the same topic: how often a model ranks it first says whether the model ranks at
all (a random-init head does not; then the figures say nothing about what quantization costs a
trained reranker, and the manifest says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (query, [relevant document, near misses...])
BUILTIN_RANKING_SET: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("How do I open a file in binary mode in Python?",
     ("Pass mode 'rb' to open() to read a file's raw bytes.", "Python lists are ordered and mutable.",
      "A binary tree node has at most two children.", "The file menu is at the top left of the window.")),
    ("When does the train to the airport leave?",
     ("Airport trains depart every twenty minutes from platform 4.", "The airport has two terminals.",
      "Trains were invented in the nineteenth century.", "Leave your luggage at the hotel reception.")),
    ("How long does the battery last on one charge?",
     ("A full charge keeps the battery running for about ten hours.", "The charger plugs into a USB-C port.",
      "Batteries should be recycled, not thrown away.", "The screen is 13 inches across.")),
    ("What should I do when the router stops working?",
     ("Hold the router's reset button for ten seconds to restart it.", "Routers forward packets between networks.",
      "The woodworking router spins at high speed.", "Our office moved to the third floor.")),
    ("Is the museum open on Mondays?",
     ("The museum is closed on Mondays and public holidays.", "The museum shows modern art and sculpture.",
      "Monday is the first day of the working week.", "Tickets cost twelve euros for adults.")),
    ("Why did the server run out of memory?",
     ("Loading the large model exhausted the machine's RAM.", "The server room is kept at 18 degrees.",
      "Memory is measured in bytes.", "The waiter served the soup first.")),
    ("How do I make bread dough smooth?",
     ("Knead the dough for ten minutes until it is smooth and elastic.", "Bread is sold at the corner bakery.",
      "Smooth jazz plays in the lobby.", "Flour is made by grinding wheat.")),
    ("How much did prices rise last year?",
     ("Over the past twelve months, prices increased by three percent.", "Prices are shown including tax.",
      "The rise of the sun is at six.", "Last year the team won the cup.")),
)


@dataclass(frozen=True)
class RankingComparison:
    max_abs_error: float  # largest |score_a - score_b| over every pair
    mean_spearman: float  # mean over queries of the rank correlation of the two orders
    top1_agreement: float  # fraction of queries where both put the same candidate first

    def to_metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_max_score_error": round(self.max_abs_error, 8),
                f"{prefix}_spearman_mean": round(self.mean_spearman, 6),
                f"{prefix}_top1_agreement": round(self.top1_agreement, 4)}


def compare_rankings(reference: list[np.ndarray], candidate: list[np.ndarray]) -> RankingComparison:
    """Each list holds one array of candidate scores per query, in the same order for both models."""
    errors = [float(np.max(np.abs(a - b))) for a, b in zip(reference, candidate)]
    spearman = [spearman_correlation(a, b) for a, b in zip(reference, candidate)]
    same_first = [int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(reference, candidate)]
    return RankingComparison(max(errors), float(np.mean(spearman)), float(np.mean(same_first)))


def hit_rate(scores: list[np.ndarray]) -> float:
    """Fraction of built-in queries whose relevant candidate (index 0) is scored highest."""
    return float(np.mean([int(np.argmax(s)) == 0 for s in scores]))


def chance_hit_rate() -> float:
    return float(np.mean([1 / len(documents) for _, documents in BUILTIN_RANKING_SET]))


def spearman_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (ties share their mean rank); 1.0 when either order is constant and both agree."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    if denominator == 0.0:
        return 1.0 if np.array_equal(ra, rb) else 0.0
    return float((ra * rb).sum() / denominator)


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(len(values), dtype=np.float64)
    for value in np.unique(values):  # ties: the mean of the ranks they span
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks
