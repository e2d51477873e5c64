"""Uncertainty for every reported number: a seeded two-level bootstrap over seeds and the
test problems within each seed, and the same for paired differences between methods.

Why two levels: a run's test mean@k varies with its seed (training and search randomness)
and with which test problems were drawn; with a handful of seeds and 16–64 problems per
seed both matter, so each resample draws seeds with replacement and then, independently
for every drawn seed, that seed's problems with replacement. The statistic is the mean of
the per-seed means (every seed counts equally). The interval is the percentile interval.

    interval = bootstrap_mean([[1, 0, 1, 1], [0, 0, 1, 1]], seed=0)   # per seed: per-problem scores
    interval.mean, interval.low, interval.high                      # 0.625 and its 95 % interval
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval, and how much data it rests on."""

    mean: float
    low: float
    high: float
    n_seeds: int
    n_problems: int  # problems per seed summed over seeds
    confidence: float = CONFIDENCE

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def format(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        """'41.2 [35.0, 47.5] n=3' (scaled, e.g. fractions to %); n is the number of seeds."""
        sign = "+" if signed else ""
        return (f"{scale * self.mean:{sign}.{digits}f} [{scale * self.low:{sign}.{digits}f}, "
                f"{scale * self.high:{sign}.{digits}f}] n={self.n_seeds}")


def bootstrap_mean(per_seed: Sequence[Sequence[float]], n_resamples: int = N_RESAMPLES,
                   confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Mean of per-seed means of per-problem scores, with a two-level percentile bootstrap
    interval (seeds, then problems within each drawn seed). Deterministic for a given
    `seed`. One seed: problems are resampled only. Seeds without problems are dropped."""
    groups = [np.asarray(scores, dtype=float) for scores in per_seed if len(scores)]
    if not groups:
        raise ValueError("bootstrap_mean needs at least one seed with at least one problem score")
    if not 0 < confidence < 1 or n_resamples < 1:
        raise ValueError("confidence must lie in (0, 1) and n_resamples be positive")
    rng = np.random.default_rng(seed)
    n_seeds = len(groups)
    point = float(np.mean([g.mean() for g in groups]))
    picks = rng.integers(0, n_seeds, size=(n_resamples, n_seeds)) if n_seeds > 1 \
        else np.zeros((n_resamples, 1), dtype=int)
    totals = np.zeros(n_resamples)
    for position in range(n_seeds):
        # Every position draws its own problem resample, so a seed drawn twice counts twice
        # with independent problem draws.
        means = np.stack([g[rng.integers(0, len(g), size=(n_resamples, len(g)))].mean(axis=1) for g in groups])
        totals += means[picks[:, position], np.arange(n_resamples)]
    resampled = totals / n_seeds
    tail = (1 - confidence) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail])
    return Interval(point, float(low), float(high), n_seeds,
                    sum(len(g) for g in groups), confidence)


def paired_difference(treatment: Mapping[int, Mapping[str, float]], baseline: Mapping[int, Mapping[str, float]],
                      n_resamples: int = N_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """treatment − baseline, paired: per seed both have, per test problem both scored,
    the difference of the two per-problem scores; then `bootstrap_mean` of those. Inputs
    map seed -> {problem id -> score}."""
    differences = []
    for run_seed in sorted(set(treatment) & set(baseline)):
        common = sorted(set(treatment[run_seed]) & set(baseline[run_seed]))
        if common:
            differences.append([treatment[run_seed][p] - baseline[run_seed][p] for p in common])
    if not differences:
        raise ValueError("paired_difference: no seed with test problems common to both")
    return bootstrap_mean(differences, n_resamples, confidence, seed)


def acceptance_power(incumbent_rate: float, improvement: float, n_problems: int, samples: int = 1,
                     n_trials: int = 20_000, seed: int = 0) -> float:
    """How often a search stage accepts a candidate whose true success rate is `improvement`
    above the incumbent's, when both are scored on the same `n_problems` search problems
    with `samples` rollouts each and the candidate must score strictly higher (a tie keeps
    the incumbent: the conservative reading of the tie-break by turns).

    Why: the search split must be large enough that a real 10-point gain is not lost to
    sampling noise. Simulated from independent binomial scores (exact for per-problem
    success rates that are all equal; heterogeneous problems only lower the variance).

        acceptance_power(0.15, 0.10, 32)   # ~0.8: 32 problems suffice at a 15 % incumbent
    """
    if not 0 <= incumbent_rate <= 1 or not 0 <= incumbent_rate + improvement <= 1:
        raise ValueError("incumbent_rate and incumbent_rate + improvement must lie in [0, 1]")
    rng = np.random.default_rng(seed)
    draws = n_problems * samples
    incumbent = rng.binomial(draws, incumbent_rate, n_trials)
    candidate = rng.binomial(draws, incumbent_rate + improvement, n_trials)
    return float(np.mean(candidate > incumbent))


def problems_for_power(incumbent_rate: float, improvement: float, power: float = 0.8, samples: int = 1,
                       max_problems: int = 1024) -> int:
    """The smallest search split whose `acceptance_power` reaches `power`."""
    for n in range(1, max_problems + 1):
        if acceptance_power(incumbent_rate, improvement, n, samples) >= power:
            return n
    raise ValueError(f"no split of at most {max_problems} problems reaches power {power}")
