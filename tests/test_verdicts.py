"""docs/results.md: each of the paper's claims judged from the records by the paired
interval of the final numbers: holds above 0, does not hold below 0, inconclusive across
it, not yet measured without the runs, never selected on test."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import write_run

from whalekit.report import verdicts
from whalekit.report.stats import Interval


def _runs(root: Path, method: str, final: float, seeds=(0, 1, 2)) -> None:
    for seed in seeds:
        write_run(root, method, [0.25, final], seed=seed, problems=32)


def test_the_verdict_follows_the_interval_of_the_paired_difference():
    assert verdicts.verdict(Interval(0.1, 0.02, 0.2, 3, 96)) == verdicts.HOLDS
    assert verdicts.verdict(Interval(-0.1, -0.2, -0.01, 3, 96)) == verdicts.FAILS
    assert verdicts.verdict(Interval(0.05, -0.02, 0.1, 3, 96)) == verdicts.INCONCLUSIVE
    assert verdicts.verdict(None) == verdicts.UNMEASURED


def test_results_say_holds_fails_inconclusive_and_unmeasured_where_each_is_due(tmp_path):
    _runs(tmp_path, "whale", 0.75)
    _runs(tmp_path, "weight_only", 0.25)  # far below: WHALE beats weight-only
    _runs(tmp_path, "harness_only", 0.75)  # equal: inconclusive
    _runs(tmp_path, "stagewise", 0.75, seeds=(0,))
    text = verdicts.results_markdown(tmp_path, "smoke", seeds=3, n_resamples=200)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| toy")}
    sections = text.split("### ")
    weight = next(s for s in sections if s.startswith("WHALE beats weight-only"))
    harness = next(s for s in sections if s.startswith("WHALE beats harness-only"))
    fst = next(s for s in sections if s.startswith("WHALE beats prompt-only"))
    adaptive = next(s for s in sections if s.startswith("adaptive switching"))
    assert "| holds |" in weight and "+50.0" in weight
    assert f"| {verdicts.INCONCLUSIVE} |" in harness
    assert f"{verdicts.UNMEASURED} (3 and 0 of 3 seeds recorded)" in fst
    assert f"{verdicts.UNMEASURED} (0 and 3 of 3 seeds recorded)" in adaptive
    bottleneck = next(s for s in sections if s.startswith("Which lever"))
    assert "| toy | +50.0" in bottleneck and "the harness lever moved it more" in bottleneck
    assert "final** test mean@2" in text and rows, "the headline is the final number, with its k"


def test_a_zero_start_run_is_judged_in_its_own_table_not_in_the_main_one(tmp_path):
    _runs(tmp_path, "whale", 0.75)
    for seed in (0, 1, 2):
        run = write_run(tmp_path, "weight_only", [0.0, 0.5], seed=seed, problems=32)
        run.root.rename(run.root.with_name(run.root.name + verdicts.ZERO_START_SUFFIX))
    text = verdicts.results_markdown(tmp_path, "smoke", n_resamples=200)
    main, zero = text.split("### The zero start")
    assert "(3 and 0 of 3 seeds recorded)" in main.split("### WHALE beats weight-only")[1].split("###")[0]
    assert "| toy | 0.0 [0.0, 0.0] n=3 | — | 50.0" in zero


def _verdict_cells(text: str) -> list[str]:
    words = (verdicts.HOLDS, verdicts.FAILS, verdicts.INCONCLUSIVE, verdicts.UNMEASURED)
    return [cell.strip() for line in text.splitlines() if line.startswith("|")
            for cell in line.split("|") if any(word in cell for word in words)]


def test_no_verdict_depends_on_the_resampling_seed(tmp_path):
    # seeds that disagree (+60, +10, -5 points): near the boundary, where a bootstrap's own seed decided before
    for seed, (whale, weights) in enumerate([(0.875, 0.25), (0.5, 0.375), (0.375, 0.4375)]):
        write_run(tmp_path, "whale", [0.25, whale], seed=seed, problems=32)
        write_run(tmp_path, "weight_only", [0.25, weights], seed=seed, problems=32)
    texts = [verdicts.results_markdown(tmp_path, "smoke", n_resamples=300, rng_seed=rng) for rng in range(20)]
    cells = [_verdict_cells(text) for text in texts]
    assert cells[0] and all(c == cells[0] for c in cells), "a verdict changed with the resampling seed"
    rows = [{line for line in text.splitlines() if line.startswith("| toy |")} for text in texts]
    assert len(set.union(*rows)) > len(rows[0]), "the problem-bootstrap column is shown, and only it moves"


def test_each_claim_shows_its_per_seed_values_and_how_many_seeds_agree(tmp_path):
    for seed, final in enumerate([0.75, 0.625, 0.5]):
        write_run(tmp_path, "whale", [0.25, final], seed=seed, problems=32)
        write_run(tmp_path, "weight_only", [0.25, 0.5], seed=seed, problems=32)
    section = verdicts.results_markdown(tmp_path, "smoke", n_resamples=100).split("### WHALE beats weight-only")[1]
    row = next(line for line in section.splitlines() if line.startswith("| toy"))
    assert "+25.0 / +12.5 / +0.0" in row and "| 2 of 3 |" in row


def test_the_conditions_the_decomposition_and_the_threats_are_part_of_the_results(tmp_path):
    _runs(tmp_path, "whale", 0.75)
    text = verdicts.results_markdown(tmp_path, "smoke", n_resamples=100)
    conditions = text.split("## Conditions")[1].split("##")[0]
    assert "| toy | tiny-random |" in conditions and "reflective" in conditions
    decomposition = text.split("### Where the change came from")[1].split("###")[0]
    # the fixture's one stage is a weight stage: 25 -> 75
    assert "| toy | WHALE | +50.0" in decomposition and "no such stage" in decomposition
    assert "## Threats to validity" in text and "Runs resumed after a kill" in text


def _seeds(*values: float) -> Interval:
    """A paired difference over seeds with these per-seed values and its 95 % t-interval."""
    from whalekit.report.stats import t_interval

    mean, low, high = t_interval(values)
    return Interval(mean, low, high, len(values), 64 * len(values), seed_values=tuple(values))


def test_with_a_margin_the_verdict_has_four_outcomes_from_constructed_seeds():
    delta = 0.05  # five points
    assert verdicts.verdict(_seeds(0.10, 0.12, 0.08, 0.11, 0.09), delta) == verdicts.HOLDS
    assert verdicts.verdict(_seeds(-0.10, -0.12, -0.08, -0.11, -0.09), delta) == verdicts.FAILS
    # Small and steady around 0: the 90 % interval lies inside ±5 points (TOST at 5 %).
    assert verdicts.verdict(_seeds(0.01, -0.01, 0.005, -0.005, 0.0), delta) == verdicts.EQUIVALENT
    # Around 0 but spread wider than the margin: neither shown different nor shown equivalent.
    assert verdicts.verdict(_seeds(0.08, -0.09, 0.03, -0.06, 0.05), delta) == verdicts.INCONCLUSIVE
    # Without a margin (the v2 rule) the steady case stays inconclusive; one seed is never equivalent.
    assert verdicts.verdict(_seeds(0.01, -0.01, 0.005, -0.005, 0.0)) == verdicts.INCONCLUSIVE
    assert verdicts.verdict(Interval(0.0, -0.01, 0.01, 1, 64, seed_values=(0.0,)), delta) == verdicts.INCONCLUSIVE


def test_paired_t_power_and_the_seeds_it_takes():
    from whalekit.report.stats import paired_t_power, seeds_for_power

    # A 1-SD effect: the textbook paired t-test needs 10 pairs for 80 % power at 5 % two-sided.
    assert seeds_for_power(sd=1.0, effect=1.0) == 10
    assert 0.78 < paired_t_power(1.0, 1.0, 10) < 0.82
    assert paired_t_power(1.0, 1.0, 30) > paired_t_power(1.0, 1.0, 10) > paired_t_power(1.0, 0.5, 10)
    assert seeds_for_power(sd=10.0, effect=0.1, most=50) is None
