"""Schedules: fixed alternation, baselines, and the adaptive switching rule."""

from __future__ import annotations

import pytest

from whalekit.schedules import Schedule, StageRecord, parse_schedule, should_switch


def test_adaptive_rule_switches_after_patience_steps_without_improvement():
    # min 2 steps, patience 2: improving signals never switch; a plateau switches 2 steps after its best.
    assert not should_switch([0.1], min_steps=2, patience=2, max_steps=10)
    assert not should_switch([0.1, 0.2, 0.3], 2, 2, 10)
    assert not should_switch([0.1, 0.3, 0.3], 2, 2, 10)  # equal is not better, but only 1 step since the best
    assert should_switch([0.1, 0.3, 0.3, 0.2], 2, 2, 10)
    assert not should_switch([0.5, 0.1], 3, 1, 10)  # below the minimum stage length nothing switches
    assert should_switch([0.1 * i for i in range(10)], 2, 2, 10)  # the maximum length always switches


def test_scripted_reward_sequence_gives_the_expected_switch_points():
    rewards = [0.10, 0.20, 0.25, 0.24, 0.22, 0.30]
    switch_at = next(i for i in range(1, len(rewards) + 1) if should_switch(rewards[:i], 2, 2, 10))
    assert switch_at == 5  # best at step 3, two steps without improvement


def test_whale_alternates_weights_first():
    schedule = Schedule("whale", 0.6, 6)
    history: list[StageRecord] = []
    kinds = []
    for _ in range(4):
        stage = schedule.next_stage(history, 1000)
        kinds.append(stage.kind)
        history.append(StageRecord(stage.kind, 100, 1))
    assert kinds == ["weight", "harness", "weight", "harness"]
    assert schedule.next_stage([], 1000).epochs == 0.6


def test_stagewise_spends_its_split_on_training_then_only_searches():
    schedule = Schedule("stagewise", 0.5, 2, stagewise_split=0.5)
    assert schedule.next_stage([StageRecord("weight", 400, 1)], 1000).kind == "weight"
    assert schedule.next_stage([StageRecord("weight", 500, 1)], 1000).kind == "harness"
    assert schedule.next_stage([StageRecord("weight", 500, 1), StageRecord("harness", 10, 1)], 1000).kind == "harness"
    reverse = Schedule("stagewise_reverse", 0.5, 2)
    assert reverse.next_stage([], 1000).kind == "harness"


def test_baselines_stay_in_their_phase():
    assert {Schedule("weight_only", 0.2, 6).next_stage([StageRecord("weight", 1, 1)] * i, 10).kind
            for i in range(3)} == {"weight"}
    assert {Schedule("harness_only", 0.2, 6).next_stage([StageRecord("harness", 1, 1)] * i, 10).kind
            for i in range(3)} == {"harness"}


def test_schedule_text_and_bad_values():
    assert parse_schedule("0.2,6") == (0.2, 6)
    with pytest.raises(ValueError, match="E,I"):
        parse_schedule("0.2")
    with pytest.raises(ValueError):
        Schedule("nonsense", 0.2, 6)
    with pytest.raises(ValueError):
        Schedule("whale", 0, 6)
