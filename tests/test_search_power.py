"""The search split's size is a power calculation: a candidate 10 points better than the
incumbent must be accepted at least 80 % of the time, at any incumbent rate the cpu
preset is calibrated for (5-35 %)."""

import pytest

from whalekit.presets import load_preset
from whalekit.report.stats import acceptance_power, problems_for_power


def test_a_bigger_search_split_accepts_a_real_improvement_more_often():
    powers = [acceptance_power(0.15, 0.10, n) for n in (8, 16, 32, 64)]
    assert powers == sorted(powers) and powers[0] < 0.7 < 0.8 < powers[-1]


def test_no_improvement_is_accepted_less_often_than_a_coin_flip_because_ties_keep_the_incumbent():
    assert acceptance_power(0.15, 0.0, 48) < 0.5


@pytest.mark.parametrize("domain", ["chess", "math", "searchqa"])
def test_the_cpu_presets_search_split_has_80_percent_power_for_a_10_point_gain_across_5_to_35_percent(domain):
    n_search = load_preset("cpu")["domains"][domain]["n_search"]
    for incumbent in (0.05, 0.15, 0.25, 0.35):
        assert acceptance_power(incumbent, 0.10, n_search) >= 0.8, (domain, incumbent)
    assert problems_for_power(0.35, 0.10) <= n_search


def test_rates_outside_0_1_are_refused():
    with pytest.raises(ValueError):
        acceptance_power(0.95, 0.10, 16)


def test_in_the_cpu_preset_a_cycles_weight_phase_uses_more_rollouts_than_its_harness_phase_as_in_the_paper():
    preset = load_preset("cpu")
    epochs, iterations = preset["schedule"]
    group = preset["rsft"]["samples_per_problem"]
    candidates, rescored = preset["search"]["candidates_per_iteration"], preset["search"]["rescore_top"]
    for domain in ("chess", "math", "searchqa"):
        sizes = preset["domains"][domain]
        weight = round(epochs * sizes["n_train"]) * group
        # an upper bound: every rescored harness plus each proposer iteration's candidates (I counts the incoming)
        harness = sizes["n_search"] * (rescored + (iterations - 1) * candidates)
        assert weight > harness, (domain, weight, harness)
