"""The typed run state: JSON round-trip, the driver's old dict (schema 1) still loads, and
a state this code does not understand is refused instead of half-read."""

from __future__ import annotations

import json

import pytest

from whalekit.infra.runs import RunDir
from whalekit.run.state import SCHEMA_VERSION, RunState

# exactly what whale.py's former fresh_state dict wrote, plus the key RunDir.commit adds
SCHEMA_1 = {"schema_version": 1, "step": 3, "stage": {"kind": "weight", "epochs": 0.5, "iterations": 0,
                                                      "adaptive": False},
            "stage_steps": 1, "stage_problems": 4, "stage_signals": [0.25], "stage_rollouts_start": 32,
            "history": [{"kind": "weight", "rollouts": 32, "steps": 2}], "accepted_id": "c0001",
            "evaluations": 2, "checkpoint": "runs/x/checkpoints/rsft-00003", "stalled": 0, "finished": False,
            "started": 1700000000.5, "search_rollouts": 16, "events_committed": 11}


def test_json_round_trip_is_exact():
    state = RunState.from_json(SCHEMA_1)
    data = json.loads(json.dumps(state.to_json()))
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert RunState.from_json(data) == state


def test_the_old_dict_loads_with_every_value_and_defaults_for_newer_keys():
    state = RunState.from_json(SCHEMA_1)
    assert (state.step, state.accepted_id, state.stage["kind"], state.history[0]["rollouts"]) == (3, "c0001",
                                                                                                   "weight", 32)
    assert state.search_iterations == 0 and state.events_committed == 11
    assert RunState.from_json({"finished": True}).finished  # the minimal state tests commit


def test_a_fresh_state_accepts_h0_and_has_done_nothing():
    state = RunState.fresh("seed", now=5.0)
    assert (state.accepted_id, state.step, state.started, state.stage, state.finished) == ("seed", 0, 5.0, None,
                                                                                           False)


def test_it_commits_through_the_run_directory(tmp_path):
    run = RunDir(tmp_path)
    run.log("run_start", rollouts=0)
    state = RunState.fresh("seed", now=1.0)
    state.finished = True
    run.commit(state.to_json())
    loaded = RunState.from_json(run.state())
    assert loaded.events_committed == 1 and loaded.finished and run.done


def test_unknown_keys_newer_schemas_and_negative_counts_are_refused():
    with pytest.raises(ValueError, match="unknown keys"):
        RunState.from_json({**SCHEMA_1, "mystery": 1})
    with pytest.raises(ValueError, match="schema 3"):
        RunState.from_json({"schema_version": 3})
    with pytest.raises(ValueError, match="step"):
        RunState(step=-1)


def test_ending_a_stage_records_its_rollouts_and_steps_and_a_stage_of_empty_steps_stalls():
    state = RunState.fresh("seed", now=0.0)
    state.begin_stage({"kind": "harness", "iterations": 2}, rollouts_spent=10)
    state.stage_steps, state.stage_empty_steps = 2, 2
    state.end_stage("harness", rollouts_spent=14)
    assert state.history == [{"kind": "harness", "rollouts": 4, "steps": 2}] and state.stalled == 1
    state.begin_stage({"kind": "weight", "epochs": 0.5}, rollouts_spent=14)
    state.stage_steps = 1
    state.end_stage("weight", rollouts_spent=30)
    assert state.history[-1] == {"kind": "weight", "rollouts": 16, "steps": 1} and state.stalled == 0
