"""Intervals and paired tests for accuracies measured on fixed task sets: the statistics every report uses.

* ``wilson(correct, n)``: the 95% Wilson score interval of one accuracy (one run, one split): better than the
  normal interval near 0 and 1 and for small n.
* ``mean_interval(values)``: mean and 95% Student-t interval over seeds (independent runs); one value gives a
  degenerate interval, never a made-up width; an infinite or NaN value gives a NaN interval and sd (no interval).
* ``mcnemar(before, after)``: the exact (binomial) McNemar test on the same tasks scored twice, e.g. iteration t-1
  vs t of one run: only the discordant tasks count; returns gained, lost and the two-sided p-value.
* ``paired_t(a, b)``: mean difference, its 95% t interval and two-sided p-value for paired values, e.g. a variant vs
  the full method on the same seeds.

Pure Python (no scipy): the t quantile and the t distribution come from the regularized incomplete beta function.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

Z95 = 1.959963984540054


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for ``correct`` successes out of ``n`` (``(0, 1)`` when n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n the bound is exactly 0 or 1; computed, it is centre - half with rounding left over (5.55e-17).
    low = 0.0 if correct <= 0 else max(0.0, centre - half)
    high = 1.0 if correct >= n else min(1.0, centre + half)
    return low, high


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes, modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_sf_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    return _betainc(df / 2, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=512)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t, by bisection on the two-sided tail (cached: a report asks for the
    same few (p, df) hundreds of times, and each bisection is 200 incomplete-beta evaluations)."""
    target = 2 * (1 - p)
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_sf_two_sided(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_interval(values: Sequence[float]) -> dict[str, float | list[float] | int]:
    """``{"mean", "ci95": [lo, hi], "n", "sd"}`` over independent runs (Student t, n - 1 degrees of freedom)."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        return {"mean": float("nan"), "ci95": [float("nan"), float("nan")], "n": 0, "sd": float("nan")}
    mean = statistics.fmean(values)
    if not all(math.isfinite(v) for v in values):
        # An infinite or NaN value (a log-PPL of a token given probability 0) has no spread to speak of, and
        # statistics.stdev raises on it (AttributeError on Python 3.11): the whole report crashed. No interval.
        return {"mean": mean, "ci95": [math.nan, math.nan], "n": n, "sd": math.nan}
    if n == 1:
        return {"mean": mean, "ci95": [mean, mean], "n": 1, "sd": 0.0}
    sd = statistics.stdev(values)
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n, "sd": sd}


# A spread of the paired differences below this is float rounding of one difference (0.45 - 0.5 and 0.55 - 0.6
# differ by 1e-16): the values compared are fractions and percentages, never this fine.
SAME_DIFFERENCE = 1e-12


def paired_t(a: Sequence[float], b: Sequence[float]) -> dict[str, float | list[float] | int]:
    """Paired comparison of ``b`` against ``a`` (same seeds, same order): ``{"diff", "ci95", "p", "n", "sd"}`` where
    diff = mean(b - a) and sd the differences' standard deviation; p is two-sided, and 1.0 -- no test, not evidence
    of no difference -- when there is nothing to test: one pair, or every difference the same (sd 0: a t statistic
    without a spread; p came out 0.0, "significant", for two seeds that happened to differ alike)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same length, got {len(a)} and {len(b)}")
    diffs = [float(y) - float(x) for x, y in zip(a, b)]
    summary = mean_interval(diffs)
    n, sd = int(summary["n"]), float(summary["sd"])
    if n >= 2 and sd < SAME_DIFFERENCE:  # the same difference on every seed, to float rounding
        sd = 0.0
    if n < 2 or sd == 0 or math.isnan(sd):
        p = 1.0
    else:
        p = t_sf_two_sided(float(summary["mean"]) / (sd / math.sqrt(n)), n - 1)
    return {"diff": summary["mean"], "ci95": summary["ci95"], "p": p, "n": n, "sd": sd}


def mcnemar(before: Sequence[bool], after: Sequence[bool]) -> dict[str, float | int]:
    """Exact McNemar test of ``after`` vs ``before`` on the same tasks: ``{"gained", "lost", "p", "n"}``."""
    if len(before) != len(after):
        raise ValueError(f"paired outcomes need the same tasks, got {len(before)} and {len(after)}")
    gained = sum(1 for x, y in zip(before, after) if y and not x)
    lost = sum(1 for x, y in zip(before, after) if x and not y)
    discordant = gained + lost
    if discordant == 0:
        return {"gained": 0, "lost": 0, "p": 1.0, "n": len(before)}
    tail = sum(math.comb(discordant, i) for i in range(min(gained, lost) + 1)) / 2**discordant
    return {"gained": gained, "lost": lost, "p": min(1.0, 2 * tail), "n": len(before)}
