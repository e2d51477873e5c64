"""Uncertainty for every reported number: a t-interval on the per-seed means (the
headline), paired per seed for differences between methods, with the per-seed values kept
beside it; and the seeded bootstrap over test problems, the measurement noise of one seed.

Why a t-interval on seed means: a run's test mean@k varies with its seed (training and
search randomness) far more than with which test problems were drawn, and the paper-scale
question is "would another seed agree". With 3 seeds a percentile bootstrap over seeds
cannot reach beyond the range of the seed means and understates the between-seed variance
by (n-1)/n in expectation (simulated coverage of its "95 %" interval: 0.77-0.83); the
Student t-interval on the seed means, n-1 degrees of freedom, covers 0.94. It is exact
arithmetic, so no verdict depends on a resampling seed. With one seed there is no
between-seed spread to measure: the interval is then the problem bootstrap, labelled so.

    interval = seed_interval([[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]])  # per seed: per-problem scores
    interval.mean, interval.low, interval.high, interval.seed_values      # t-interval, and the 3 seed means
    noise = bootstrap_mean([[1, 0, 1, 1]], seed=0)                       # one seed's measurement noise
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
N_RESAMPLES = 10_000  # the problem bootstrap's draws: fixed and large, so its bounds move < 0.5 points with its seed
SEEDS_BASIS, PROBLEMS_BASIS = "seeds", "problems"


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval, and how much data it rests on."""

    mean: float
    low: float
    high: float
    n_seeds: int
    n_problems: int  # problems per seed summed over seeds
    confidence: float = CONFIDENCE
    seed_values: tuple[float, ...] = ()  # the per-seed means (or paired differences), in seed order
    basis: str = PROBLEMS_BASIS  # SEEDS_BASIS: t-interval on seed means; PROBLEMS_BASIS: problem bootstrap

    @property
    def agreeing_seeds(self) -> int:
        """How many seeds lie on the same side of 0 as the mean (for a difference: how many
        seeds agree with its sign); 0 when the mean is 0."""
        sign = np.sign(self.mean)
        return int(sum(np.sign(v) == sign for v in self.seed_values)) if sign else 0

    def format_seeds(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        """'79.1 / 11.7 / 88.9': the per-seed values, scaled."""
        sign = "+" if signed else ""
        return " / ".join(f"{scale * v:{sign}.{digits}f}" for v in self.seed_values)

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def format(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        """'41.2 [35.0, 47.5] n=3' (scaled, e.g. fractions to %); n is the number of seeds."""
        sign = "+" if signed else ""
        basis = " (problem noise only)" if self.basis == PROBLEMS_BASIS and self.n_seeds == 1 else ""
        return (f"{scale * self.mean:{sign}.{digits}f} [{scale * self.low:{sign}.{digits}f}, "
                f"{scale * self.high:{sign}.{digits}f}] n={self.n_seeds}{basis}")


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student's t-interval of the mean of `values` (n-1 degrees of
    freedom); needs at least 2 values. Equal values give a zero-width interval."""
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        raise ValueError("a t-interval needs at least 2 values (seeds)")
    mean = float(array.mean())
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, array.size - 1) * array.std(ddof=1) / np.sqrt(array.size))
    return mean, mean - half, mean + half


def seed_interval(per_seed: Sequence[Sequence[float]], confidence: float = CONFIDENCE,
                  n_resamples: int = N_RESAMPLES, seed: int = 0,
                  bounds: tuple[float, float] | None = None) -> Interval:
    """The headline interval: the mean of the per-seed means of per-problem scores, with the
    t-interval over those seed means and the seed means themselves. One seed: the problem
    bootstrap (`bootstrap_mean`, basis PROBLEMS_BASIS), the only spread one seed shows.
    `bounds`: the range the quantity can take (a success rate: (0, 1)); the interval is
    clipped to it, since a t-interval of a bounded mean can reach past the bound.
    Seeds without problems are dropped."""
    groups = [np.asarray(scores, dtype=float) for scores in per_seed if len(scores)]
    if not groups:
        raise ValueError("seed_interval needs at least one seed with at least one problem score")
    means = tuple(float(g.mean()) for g in groups)
    if len(groups) == 1:
        single = bootstrap_mean([groups[0].tolist()], n_resamples, confidence, seed)
        return Interval(single.mean, single.low, single.high, 1, single.n_problems, confidence, means, PROBLEMS_BASIS)
    mean, low, high = t_interval(means, confidence)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(mean, low, high, len(groups), sum(len(g) for g in groups), confidence, means, SEEDS_BASIS)


def bootstrap_mean(per_seed: Sequence[Sequence[float]], n_resamples: int = N_RESAMPLES,
                   confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Mean of per-seed means of per-problem scores, with a two-level percentile bootstrap
    interval (seeds, then problems within each drawn seed). Deterministic for a given
    `seed`. One seed: problems are resampled only, which is how it is used now: the
    measurement noise of one seed's number. Over 2-5 seeds its interval is too narrow
    (see the module docstring); `seed_interval` is the headline. Seeds without problems are dropped."""
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
                    sum(len(g) for g in groups), confidence, tuple(float(g.mean()) for g in groups))


def _paired(treatment: Mapping[int, Mapping[str, float]], baseline: Mapping[int, Mapping[str, float]]
            ) -> list[list[float]]:
    """Per seed both have: the per-problem differences on the problems both scored."""
    differences = []
    for run_seed in sorted(set(treatment) & set(baseline)):
        common = sorted(set(treatment[run_seed]) & set(baseline[run_seed]))
        if common:
            differences.append([treatment[run_seed][p] - baseline[run_seed][p] for p in common])
    if not differences:
        raise ValueError("paired_difference: no seed with test problems common to both")
    return differences


def paired_difference(treatment: Mapping[int, Mapping[str, float]], baseline: Mapping[int, Mapping[str, float]],
                      n_resamples: int = N_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """treatment − baseline, paired per seed: per seed both have, the mean over the test
    problems both scored of the per-problem difference; then `seed_interval` of those (a
    paired t-interval on the per-seed differences, its values the per-seed differences).
    Inputs map seed -> {problem id -> score}."""
    return seed_interval(_paired(treatment, baseline), confidence, n_resamples, seed, bounds=(-1.0, 1.0))


def paired_problem_noise(treatment: Mapping[int, Mapping[str, float]], baseline: Mapping[int, Mapping[str, float]],
                         n_resamples: int = N_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """The same paired difference with the two-level bootstrap (`bootstrap_mean`): what the
    tables reported before the t-interval, kept to show the problem-level noise."""
    return bootstrap_mean(_paired(treatment, baseline), n_resamples, confidence, seed)


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


def equivalent_within(values: Sequence[float], margin: float, alpha: float = 0.05) -> bool:
    """Paired TOST: the two one-sided t-tests at level `alpha` that the mean of `values` (the
    per-seed paired differences) lies above −margin and below +margin, both rejected; the same
    as the (1 − 2·alpha) t-interval lying inside (−margin, margin). Needs at least 2 values."""
    if margin <= 0:
        raise ValueError("the equivalence margin must be positive")
    _, low, high = t_interval(values, 1 - 2 * alpha)
    return -margin < low and high < margin


def paired_t_power(sd: float, effect: float, n_seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level `alpha` over `n_seeds` seeds to find a true
    mean difference `effect` when the per-seed differences have standard deviation `sd`
    (the noncentral t; exact arithmetic, no simulation)."""
    if n_seeds < 2:
        return 0.0
    if sd <= 0:
        return 1.0 if effect else alpha
    df = n_seeds - 1
    critical = float(scipy_stats.t.ppf(1 - alpha / 2, df))
    shift = abs(effect) / (sd / np.sqrt(n_seeds))
    upper = float(scipy_stats.nct.sf(critical, df, shift))
    lower = float(scipy_stats.nct.cdf(-critical, df, shift))  # the wrong-sign tail: ~0, and nan where scipy underflows
    return upper + (lower if np.isfinite(lower) else 0.0)


def seeds_for_power(sd: float, effect: float, power: float = 0.8, alpha: float = 0.05, most: int = 200) -> int | None:
    """The fewest seeds (at least 2) whose paired t-test reaches `power` for `effect` at this
    `sd`; None when `most` seeds do not."""
    for n in range(2, most + 1):
        if paired_t_power(sd, effect, n, alpha) >= power:
            return n
    return None
