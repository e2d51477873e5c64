"""The threats to validity are read from the records: a run whose wall clock exceeds its
phase clock was resumed, a (domain, seed) made on two CPU kinds is mixed, an initial
evaluation made twice differs, a calibration on the test split is named."""

from __future__ import annotations

import json

from run_fixtures import write_run

from whalekit.report.run_summaries import load_run
from whalekit.report.threats import (
    INITIAL_DIFFERS,
    MIXED_CPU,
    RESUMED,
    calibration_split,
    differing_initial_evaluations,
    markers,
    mixed_cpu_groups,
    resumed_runs,
)


def _run(tmp_path, method, seed=0, cpu="CPU A", initial=0.25, wall_s=1.0):
    run = write_run(tmp_path, method, [initial, 0.5], seed=seed)
    config = run.config()
    run.write_config({**config, "provenance": {**(config.get("provenance") or {}), "cpu_kind": cpu}})
    events = [json.loads(line) for line in run.events_path.read_text().splitlines()]
    events[-1]["wall_s"] = wall_s
    run.events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return load_run(run.root)


def test_a_run_whose_wall_clock_outruns_its_phase_clock_was_resumed(tmp_path):
    resumed = _run(tmp_path, "whale", wall_s=5000.0)
    steady = _run(tmp_path, "weight_only")
    threat = resumed_runs([resumed, steady])
    assert threat.cells == {("toy", "whale")} and "5,000 s" in threat.lines[0]
    assert markers([threat], "toy", "whale") == RESUMED and markers([threat], "toy", "weight_only") == ""


def test_a_seed_made_on_two_cpu_kinds_marks_the_odd_runs(tmp_path):
    runs = [_run(tmp_path, "whale"), _run(tmp_path, "weight_only"), _run(tmp_path, "fst", cpu="CPU B")]
    threat = mixed_cpu_groups(runs)
    assert threat.marker == MIXED_CPU and threat.cells == {("toy", "fst")}
    assert "CPU A" in threat.lines[0] and "CPU B" in threat.lines[0]


def test_an_initial_evaluation_made_twice_with_another_number_is_named(tmp_path):
    runs = [_run(tmp_path, "whale"), _run(tmp_path, "weight_only"), _run(tmp_path, "fst", initial=0.375)]
    threat = differing_initial_evaluations(runs)
    assert threat.marker == INITIAL_DIFFERS and threat.cells == {("toy", "fst")}
    assert "25.0 (2 runs), 37.5 (1 runs)" in threat.lines[0]


def test_a_calibration_on_the_test_split_says_so(tmp_path):
    (tmp_path / "chess.json").write_text(json.dumps({"split": "test", "initial_harness": "h0_cpu"}))
    (tmp_path / "math.json").write_text(json.dumps({"split": "search", "initial_harness": "h0_cpu"}))
    lines = calibration_split(tmp_path).lines
    assert "not held out" in lines[0] and "not held out" not in lines[1]
