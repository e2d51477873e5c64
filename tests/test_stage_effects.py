"""A run's test change splits over its stages: each stage's change is the evaluation after
it minus the one before; a stage that changed nothing counts 0; the parts add up to
final − initial."""

from __future__ import annotations

import pytest
from run_fixtures import write_run

from whalekit.report.run_summaries import load_run
from whalekit.report.stage_effects import lever_totals, stage_counts, stage_effects


def test_each_stage_carries_the_change_across_it_and_the_levers_add_up(tmp_path):
    run = load_run(write_run(tmp_path, "whale", [0.25, 0.5, 0.375, 0.75]).root)  # weight, harness, weight
    effects = stage_effects(run)
    assert [(e.kind, e.stage) for e in effects] == [("weight", 0), ("harness", 1), ("weight", 2)]
    assert [e.change for e in effects] == pytest.approx([0.25, -0.125, 0.375])
    totals = lever_totals(run)
    assert totals == pytest.approx({"weight": 0.625, "harness": -0.125})
    assert sum(totals.values()) == pytest.approx(0.75 - 0.25)
    assert stage_counts(run) == {"weight": 2, "harness": 1}


def test_a_stage_with_no_evaluation_after_it_changed_nothing(tmp_path):
    run = load_run(write_run(tmp_path, "whale", [0.25, 0.5, 0.75]).root)
    run.evals = [e for e in run.evals if e["stages_done"] != 1]  # nothing evaluated after stage 0
    effects = stage_effects(run)
    assert effects[0].change == 0.0 and not effects[0].evaluated
    assert effects[1].change == pytest.approx(0.5)
