"""How a run's stages are chosen and closed: the next stage from the method's schedule (or,
in weight_steps mode, the stagewise methods' two budgets), when the running one is done
(its epochs or iterations, or the adaptive rule on its training-side signal), and what
closing it reports. The rules read the run state; the driver writes it.

    scheduler = StageScheduler(config, schedule, accounting, n_train=len(splits.train), weight=rsft_phase)
    stage = scheduler.next_stage(state)               # Stage("weight", epochs=0.6) ...

Only training-side signals reach these decisions (the per-batch training reward, the best
search score on the search split), never a test score.
"""

from __future__ import annotations

from typing import Any

from whalekit.run.budget_accounting import BudgetAccounting
from whalekit.run.config import RunConfig
from whalekit.run.methods import method
from whalekit.run.phases.base import WeightPhase
from whalekit.run.schedules import Schedule, Stage, StageRecord, should_switch, window_means
from whalekit.run.state import RunState


class StageScheduler:
    """The stage rules of one run."""

    def __init__(self, config: RunConfig, schedule: Schedule, accounting: BudgetAccounting, n_train: int,
                 weight: WeightPhase | None = None):
        self.config = config
        self.schedule = schedule
        self.accounting = accounting
        self.n_train = n_train  # weight-training problems: an epoch's size
        self.weight = weight  # the run's weight phase (None: a method without weight stages)

    def next_stage(self, state: RunState) -> Stage:
        """The stage to run after those in `state.history`."""
        history = [StageRecord(**h) for h in state.history]
        order = method(self.config.method).stagewise
        if self.config.budget.mode == "weight_steps" and order is not None:
            # Equal weight steps: the whole weight budget in one phase, the search's in the other.
            weight = Stage("weight", epochs=self.schedule.epochs)
            harness = Stage("harness", iterations=self.schedule.iterations)
            first, second = (weight, harness) if order[0] == "weight" else (harness, weight)
            first_left = self.accounting.weight_steps_left(state) if first.kind == "weight" \
                else self.accounting.search_iterations_left(state)
            return first if first_left else second
        return self.schedule.next_stage(history, self.accounting.budget.total)

    def finished(self, state: RunState, stage: Stage) -> bool:
        """The running stage is done: its epochs or iterations, an early stop, or the adaptive rule."""
        if state.stage_stop:  # the search accepted a candidate at the early-stop success rate
            return True
        if stage.adaptive:
            cfg = self.config.adaptive
            if stage.kind == "harness":
                return should_switch(state.stage_signals, cfg.min_search_iterations, cfg.search_patience,
                                     cfg.max_search_iterations)
            # Weight stages: the per-batch training reward, averaged over a sliding window
            # of this stage's batches (the authors' phase-local window).
            assert self.weight is not None, "a weight stage without a weight phase"
            batches = self.weight.epoch_steps
            signals = window_means(state.stage_signals, batches(cfg.weight_window_epochs))
            return should_switch(signals, batches(cfg.min_weight_epochs), batches(cfg.weight_patience_epochs),
                                 batches(cfg.max_weight_epochs))
        if stage.kind == "weight":
            return state.stage_problems >= round(stage.epochs * self.n_train)
        return state.stage_steps >= stage.iterations

    def stage_end(self, state: RunState, stage: Stage, budget_exhausted: bool = False) -> dict[str, Any]:
        """The fields of the `stage_end` event, beyond kind, index and rollouts, of the stage
        `state` has just recorded as finished (`RunState.end_stage`)."""
        closed = state.history[-1]
        productive = state.stage_steps - state.stage_empty_steps
        extra: dict[str, Any] = {}
        if stage.kind == "harness":  # a phase whose every iteration was empty says so
            extra = {"empty_steps": state.stage_empty_steps,
                     "empty": bool(state.stage_steps) and not productive}
            if state.stage_stop:
                extra["stopped"] = state.stage_stop
        if budget_exhausted:
            extra["budget_exhausted"] = True
        return {"steps": closed["steps"], "stage_rollouts": closed["rollouts"], **extra}
