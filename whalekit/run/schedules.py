"""Which phase runs next, and for how long: WHALE's fixed (E, I) schedules, the
baselines' schedules, and the adaptive rule. The order of a method's stages is its row's
`stages` in whalekit.run.methods.

A schedule only sees training signals (RSFT rewards, search-split archive scores): the
driver never hands it a test or validation score, so it cannot peek.

    schedule = Schedule("whale", epochs=0.6, iterations=5)   # I = 6, the incoming harness counted
    stage = schedule.next_stage(history, budget_total)      # Stage("weight", epochs=0.6) ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from whalekit.run.methods import method

Kind = Literal["weight", "harness"]


@dataclass(frozen=True)
class Stage:
    kind: Kind
    epochs: float = 0.0  # weight stages: epochs of the training set (fractional)
    iterations: int = 0  # harness stages: proposer iterations (the incoming harness's evaluation not counted)
    adaptive: bool = False  # length decided step by step by the adaptive rule


@dataclass
class StageRecord:
    """What a finished stage did: the only history a schedule may read."""

    kind: Kind
    rollouts: int
    steps: int


@dataclass
class AdaptiveConfig:
    """The adaptive rule's thresholds, the authors' by default. Weight-stage lengths are in
    epochs of the training set (converted to RSFT batches at the run's n_train and batch
    size); harness-stage lengths in proposer iterations (the incoming harness's evaluation
    is not one of them)."""

    min_weight_epochs: float = 0.2  # a weight stage runs at least this long
    weight_window_epochs: float = 0.2  # the training reward is averaged over a sliding window this long
    weight_patience_epochs: float = 0.2  # switch after this long without a new best windowed reward
    max_weight_epochs: float = 0.0  # a weight stage never runs longer; 0 = no cap (the authors' rule has none)
    min_search_iterations: int = 5  # a harness stage runs at least this many proposer iterations
    search_patience: int = 2  # switch after this many iterations without a new best search-split score
    max_search_iterations: int = 15  # a harness stage never runs more proposer iterations than this

    def __post_init__(self) -> None:
        if min(self.min_weight_epochs, self.weight_window_epochs, self.weight_patience_epochs) <= 0:
            raise ValueError("adaptive weight-stage lengths (epochs) must be positive")
        if self.max_weight_epochs < 0:
            raise ValueError("max_weight_epochs must be >= 0 (0: no cap)")
        if min(self.min_search_iterations, self.search_patience, self.max_search_iterations) < 1:
            raise ValueError("adaptive harness-stage iterations and patience must be >= 1")

    def weight_batches(self, epochs: float, n_train: int, batch_problems: int) -> int:
        """An epoch length in RSFT batches: at least one batch (0 stays 0, for 'no cap')."""
        return 0 if epochs == 0 else max(1, math.ceil(round(epochs * n_train / batch_problems, 9)))


def window_means(rewards: list[float], window: int) -> list[float]:
    """The sliding-window mean of a stage's per-batch training rewards after each batch."""
    return [sum(rewards[max(0, i + 1 - window):i + 1]) / len(rewards[max(0, i + 1 - window):i + 1])
            for i in range(len(rewards))]


def should_switch(signals: list[float], min_steps: int, patience: int, max_steps: int) -> bool:
    """The adaptive rule for one stage. `signals` holds the stage's training signal after
    each of its steps so far (weight phase: sliding-window mean training reward; harness
    phase: best search-split score in the archive). Switch once the stage is at least
    `min_steps` long and the signal has not improved on its running best for `patience`
    steps, or the stage reached `max_steps` (0: no maximum)."""
    if max_steps and len(signals) >= max_steps:
        return True
    if len(signals) < min_steps:
        return False
    best_at = max(range(len(signals)), key=lambda i: (signals[i], -i))  # first time the best was reached
    return len(signals) - 1 - best_at >= patience


@dataclass
class Schedule:
    method: str  # a row of whalekit.run.methods: its `stages` order the stages
    epochs: float  # E
    # proposer iterations per harness stage: I - 1 under the authors' counting, where I counts
    # the incoming harness's evaluation as iteration 1 (SearchConfig.proposer_iterations)
    iterations: int
    stagewise_split: float = 0.5  # stagewise: share of the budget spent in the first phase
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    def __post_init__(self) -> None:
        row = method(self.method)  # an unknown method is a ValueError naming the known ones
        if self.epochs <= 0 or self.iterations < 0:
            raise ValueError("a schedule needs E > 0 epochs and I > 0 iterations per stage")
        if row.fixed_harness_stages and self.iterations < 1:
            raise ValueError("a harness stage needs a proposer iteration: I counts the incoming harness's evaluation "
                             "as iteration 1, so a harness stage needs I >= 2 (or search.count_incoming=false)")
        if not 0 < self.stagewise_split < 1:
            raise ValueError("stagewise_split must lie strictly between 0 and 1")

    def next_stage(self, history: list[StageRecord], budget_total: int) -> Stage:
        weight, harness = Stage("weight", epochs=self.epochs), Stage("harness", iterations=self.iterations)
        last = history[-1].kind if history else None
        row = method(self.method)
        stages = row.stages
        if stages in ("weight", "harness"):
            return weight if stages == "weight" else harness
        order = row.stagewise
        if order is not None:
            first, second = (weight, harness) if order[0] == "weight" else (harness, weight)
            spent_first = sum(h.rollouts for h in history if h.kind == first.kind)
            switched = any(h.kind == second.kind for h in history)
            return first if not switched and spent_first < self.stagewise_split * budget_total else second
        if stages == "alternate_adaptive":
            kind: Kind = "harness" if last == "weight" else "weight"
            return Stage(kind, adaptive=True)
        return harness if last == "weight" else weight  # alternate, weights first


def parse_schedule(text: str | tuple[float, int] | list[float]) -> tuple[float, int]:
    """"0.6,6" -> (0.6, 6)."""
    if isinstance(text, (tuple, list)):
        epochs, iterations = text
    else:
        try:
            epochs_text, iterations_text = str(text).split(",")
            epochs, iterations = float(epochs_text), int(iterations_text)
        except ValueError as exc:
            raise ValueError(f"schedule must look like 'E,I' (e.g. '0.6,6'), got {text!r}") from exc
    return float(epochs), int(iterations)
