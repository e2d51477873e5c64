"""docs/results.md: each of the paper's claims judged from the records by the paired
interval of the final numbers: holds above 0, does not hold below 0, inconclusive across
it, not yet measured without the runs, never selected on test."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import write_run

from whalekit import verdicts
from whalekit.stats import Interval


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
    assert "| toy | +50.0" in bottleneck and "harness-dominated" in bottleneck
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
