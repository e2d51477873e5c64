"""Schedules: fixed alternation, baselines, and the adaptive switching rule."""

from __future__ import annotations

import pytest

from whalekit.run.schedules import AdaptiveConfig, Schedule, StageRecord, parse_schedule, should_switch, window_means
from whalekit.search.stage import SearchConfig


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


@pytest.mark.parametrize("split", [0.0, 1.0, -0.2, 1.5])
def test_a_stagewise_split_outside_0_1_is_refused(split):
    """The share of the budget the first stagewise phase spends lies strictly between 0 and 1
    (the check used to sit after a `return` and never ran)."""
    with pytest.raises(ValueError, match="stagewise_split"):
        Schedule("stagewise", 0.5, 2, stagewise_split=split)
    Schedule("stagewise", 0.5, 2, stagewise_split=0.25)  # inside: accepted


def test_a_harness_stage_of_i_6_runs_5_proposer_iterations():
    """The authors' counting: the incoming harness's evaluation is iteration 1."""
    history = [StageRecord("weight", 10, 1)]
    assert SearchConfig().proposer_iterations(6) == 5
    assert SearchConfig(count_incoming=False).proposer_iterations(6) == 6
    assert Schedule("whale", 0.6, SearchConfig().proposer_iterations(6)).next_stage(history, 1000).iterations == 5
    assert Schedule("harness_only", 0.6, 1).next_stage([], 1000).iterations == 1
    with pytest.raises(ValueError, match="incoming"):
        Schedule("whale", 0.6, SearchConfig().proposer_iterations(1))
    Schedule("weight_only", 0.6, 0)  # no harness stages: I = 1 is fine


def test_adaptive_thresholds_default_to_the_authors_and_scale_by_epochs():
    cfg = AdaptiveConfig()
    assert (cfg.min_weight_epochs, cfg.weight_window_epochs, cfg.weight_patience_epochs) == (0.2, 0.2, 0.2)
    assert (cfg.min_search_iterations, cfg.search_patience, cfg.max_search_iterations) == (5, 2, 15)
    assert cfg.max_weight_epochs == 0  # no cap on a weight phase
    assert cfg.weight_batches(0.2, 18_946, 256) == 15  # their search QA ROUND_STEPS for 0.2 epoch
    assert cfg.weight_batches(0.2, 16_384, 256) == 13  # chess
    assert cfg.weight_batches(0.2, 40, 8) == 1  # the cpu preset: one batch of 8
    assert cfg.weight_batches(0.0, 40, 8) == 0  # 0: no cap
    with pytest.raises(ValueError):
        AdaptiveConfig(min_search_iterations=0)


def test_the_weight_rule_windows_the_stages_rewards_and_switches_after_the_patience():
    # window 2, min 2, patience 2: the windowed mean peaks at batch 3 and has not improved by batch 5.
    rewards = [0.1, 0.3, 0.5, 0.2, 0.2, 0.9]
    means = window_means(rewards, 2)
    assert means == pytest.approx([0.1, 0.2, 0.4, 0.35, 0.2, 0.55])
    switch_at = next(i for i in range(1, 7) if should_switch(window_means(rewards[:i], 2), 2, 2, 0))
    assert switch_at == 5
    assert not should_switch([0.1 * i for i in range(50)], 2, 2, 0)  # max 0: no cap, improving never switches


class _WeightPhaseOfBatches:
    """A weight phase whose every epoch length is `batches` of its steps (run.phases.base.WeightPhase's epoch_steps)."""

    def __init__(self, batches: int):
        self.batches = batches

    def epoch_steps(self, epochs: float) -> int:
        return self.batches if epochs else 0


@pytest.mark.parametrize("batches, switches", [(1, True), (3, False)])
def test_the_adaptive_rule_measures_a_weight_stage_in_the_weight_phase_s_steps(batches, switches, tmp_path):
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.run.budget_accounting import BudgetAccounting
    from whalekit.run.config import resolve_config
    from whalekit.run.schedules import Stage
    from whalekit.run.stage_scheduling import StageScheduler
    from whalekit.run.state import RunState

    config = resolve_config("smoke", domain="toy", method="adaptive", runs_root=str(tmp_path))
    scheduler = StageScheduler(config, Schedule("adaptive", 0.5, 2), BudgetAccounting(config, RolloutBudget(64), {}),
                               n_train=8, weight=_WeightPhaseOfBatches(batches))  # type: ignore[arg-type]
    state = RunState(stage_signals=[0.5, 0.4])  # the reward fell after the first batch
    # min, window and patience of one batch: switch; of three: the stage is too short to switch
    assert scheduler.finished(state, Stage("weight", adaptive=True)) is switches
