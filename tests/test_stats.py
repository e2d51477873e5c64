"""The intervals behind every table cell. The headline, a t-interval on the seed means,
covers a known mean about as often as it claims even at 3 seeds (where the old two-level
bootstrap does not), depends on no random seed, keeps the per-seed values, and pairs
differences per seed; the problem bootstrap stays as one seed's measurement noise."""

from __future__ import annotations

import numpy as np
import pytest

from whalekit.report.stats import (
    PROBLEMS_BASIS,
    SEEDS_BASIS,
    bootstrap_mean,
    paired_difference,
    seed_interval,
    t_interval,
)


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


def test_format_reads_percent_with_the_seed_count_and_says_when_one_seed_shows_only_problem_noise():
    assert seed_interval([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]]).format() == "83.3 [47.5, 119.2] n=3"
    single = seed_interval([[1, 0, 1, 1]], seed=0)
    assert single.format().startswith("75.0 [") and single.format().endswith("] n=1 (problem noise only)")
    assert paired_difference({0: {"a": 1.0}}, {0: {"a": 0.0}}).format(signed=True).startswith("+100.0 [+100.0")


def test_paired_difference_uses_only_shared_seeds_and_problems():
    whale = {0: {"a": 1.0, "b": 1.0, "c": 0.5}, 1: {"a": 1.0, "b": 0.0}, 2: {"a": 1.0}}
    baseline = {0: {"a": 0.0, "b": 1.0}, 1: {"a": 0.5, "b": 0.0}}  # no seed 2; seed 0 lacks problem c
    difference = paired_difference(whale, baseline, seed=0)
    assert difference.n_seeds == 2 and difference.n_problems == 4
    assert difference.seed_values == pytest.approx((0.5, 0.25))  # per seed: the mean paired difference
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


def _coverage(rng, interval, n_seeds=3, seed_sd=0.20, trials=400):
    return np.mean([interval([list(r) for r in _runs(rng, n_seeds, 64, seed_sd=seed_sd)], t).contains(0.4)
                    for t in range(trials)])


def test_at_three_seeds_the_t_interval_covers_as_claimed_and_the_two_level_bootstrap_does_not():
    # seeds differ by SD 20 points: the between-seed spread dominates the 64-problem noise
    t_cover = _coverage(np.random.default_rng(5), lambda data, t: seed_interval(data))
    boot_cover = _coverage(np.random.default_rng(5), lambda data, t: bootstrap_mean(data, n_resamples=400, seed=t))
    assert 0.92 <= t_cover <= 0.99, t_cover
    assert boot_cover < 0.88 and boot_cover < t_cover - 0.05, (boot_cover, t_cover)


def test_the_seed_interval_is_a_t_interval_on_the_seed_means_and_keeps_them():
    per_seed = [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    interval = seed_interval(per_seed)
    mean, low, high = t_interval([0.5, 0.75, 1.0])
    assert interval.basis == SEEDS_BASIS and interval.seed_values == (0.5, 0.75, 1.0)
    assert (interval.mean, interval.low, interval.high) == pytest.approx((mean, low, high))
    # t(0.975, 2 df) = 4.303, the seed means' standard error 0.25 / sqrt(3)
    assert high - mean == pytest.approx(4.3027 * 0.25 / np.sqrt(3), rel=1e-4)
    assert seed_interval([[1, 0]], seed=0).basis == PROBLEMS_BASIS, "one seed: only the problem noise is known"


def test_no_random_seed_moves_an_interval_of_several_seeds():
    data = [list(np.random.default_rng(s).random(20)) for s in range(3)]
    assert len({seed_interval(data, seed=s) for s in range(20)}) == 1


def test_a_rate_interval_is_clipped_to_what_a_rate_can_be():
    wide = seed_interval([[1, 1], [1, 1], [0, 1]], bounds=(0.0, 1.0))
    assert wide.high == 1.0 and wide.low < wide.mean


def test_seeds_agreeing_counts_the_seeds_on_the_side_of_the_mean():
    better = {0: {"a": 1.0}, 1: {"a": 1.0}, 2: {"a": 0.0}}
    worse = {0: {"a": 0.0}, 1: {"a": 0.5}, 2: {"a": 0.5}}
    difference = paired_difference(better, worse)
    assert difference.seed_values == pytest.approx((1.0, 0.5, -0.5)) and difference.agreeing_seeds == 2
