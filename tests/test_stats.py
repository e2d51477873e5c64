"""The bootstrap behind every table cell: it covers a known mean about as often as it
claims, narrows with more seeds, is deterministic per seed, and pairs differences on the
same seeds and problems."""

from __future__ import annotations

import numpy as np
import pytest

from whalekit.stats import bootstrap_mean, paired_difference


def _runs(rng, n_seeds, n_problems, p=0.4, seed_sd=0.08):
    """Bernoulli problem scores around a per-seed accuracy p + N(0, seed_sd)."""
    accuracies = np.clip(p + rng.normal(0, seed_sd, n_seeds), 0.01, 0.99)
    return [rng.random(n_problems) < a for a in accuracies]


def test_the_95_percent_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    trials = 300
    covered = sum(bootstrap_mean(_runs(rng, 5, 32), n_resamples=400, seed=t).contains(0.4) for t in range(trials))
    assert 0.88 <= covered / trials <= 0.995, covered / trials


def test_more_seeds_give_a_narrower_interval():
    rng = np.random.default_rng(2)
    few = np.mean([bootstrap_mean(_runs(rng, 2, 16), seed=t).width for t in range(20)])
    many = np.mean([bootstrap_mean(_runs(rng, 8, 16), seed=t).width for t in range(20)])
    assert many < 0.7 * few, (few, many)


def test_one_seed_resamples_problems_and_the_mean_is_the_mean_of_seed_means():
    interval = bootstrap_mean([[1, 0, 1, 1], [0, 0, 1, 1, 1, 1]], seed=0)
    assert interval.mean == pytest.approx((0.75 + 4 / 6) / 2)
    assert interval.n_seeds == 2 and interval.n_problems == 10
    single = bootstrap_mean([[1, 0, 1, 0]], seed=0)
    assert single.mean == 0.5 and 0.0 <= single.low < 0.5 < single.high <= 1.0
    assert bootstrap_mean([[1, 1, 1]]).width == 0.0  # no variation, no width


def test_the_bootstrap_is_deterministic_per_seed():
    data = [list(np.random.default_rng(0).random(20)), list(np.random.default_rng(1).random(20))]
    assert bootstrap_mean(data, seed=3) == bootstrap_mean(data, seed=3)
    assert bootstrap_mean(data, seed=3) != bootstrap_mean(data, seed=4)


def test_format_reads_percent_with_the_seed_count():
    interval = bootstrap_mean([[1, 0, 1, 1]], seed=0)
    assert interval.format().startswith("75.0 [") and interval.format().endswith("] n=1")
    assert paired_difference({0: {"a": 1.0}}, {0: {"a": 0.0}}).format(signed=True).startswith("+100.0 [+100.0")


def test_paired_difference_uses_only_shared_seeds_and_problems():
    whale = {0: {"a": 1.0, "b": 1.0, "c": 0.5}, 1: {"a": 1.0, "b": 0.0}, 2: {"a": 1.0}}
    baseline = {0: {"a": 0.0, "b": 1.0}, 1: {"a": 0.5, "b": 0.0}}  # no seed 2; seed 0 lacks problem c
    difference = paired_difference(whale, baseline, seed=0)
    assert difference.n_seeds == 2 and difference.n_problems == 4
    assert difference.mean == pytest.approx(((1 + 0) / 2 + (0.5 + 0) / 2) / 2)
    with pytest.raises(ValueError, match="no seed"):
        paired_difference({0: {"a": 1.0}}, {1: {"a": 1.0}})


def test_pairing_removes_the_shared_problem_difficulty():
    # Problems differ wildly in difficulty; the treatment adds 0.1 on every problem.
    rng = np.random.default_rng(3)
    difficulty = {s: {f"p{i}": float(rng.random()) for i in range(32)} for s in range(3)}
    better = {s: {p: v + 0.1 for p, v in problems.items()} for s, problems in difficulty.items()}
    paired = paired_difference(better, difficulty, seed=0)
    unpaired = bootstrap_mean([list(v.values()) for v in better.values()], seed=0)
    assert paired.mean == pytest.approx(0.1) and paired.width < 1e-9 < unpaired.width
