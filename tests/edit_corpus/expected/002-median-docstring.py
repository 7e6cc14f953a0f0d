"""Small statistics helpers used by the report generator."""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence


def mean(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    return sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """The middle value; the mean of the two middle ones for an even count."""
    if not values:
        return 0.0
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def mode(values: Iterable[float]) -> float | None:
    counts = Counter(values)
    if not counts:
        return None

    best, _ = counts.most_common(1)[0]
    return best


def variance(values: Sequence[float], *, sample: bool = False) -> float:
    if not values:
        return 0.0
    m = mean(values)
    total = sum((v - m) ** 2 for v in values)
    return total / (len(values) - 1 if sample else len(values))


def stdev(values: Sequence[float], *, sample: bool = False) -> float:
    return math.sqrt(variance(values, sample=sample))


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    if not 0 <= p <= 100:
        raise ValueError(f"percentile out of range: {p}")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return ordered[int(k)]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
