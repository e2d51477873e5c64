"""Budget accounting for one run, the one owner of what the run may still spend: whether the
run goes on, whether a phase may take another step, the work done, and the spent count a
resumed run restores once from what its phases committed.

    accounting = BudgetAccounting(config, budget, phases)    # phases: {"weight": RSFTPhase, ...}
    while accounting.goes_on(state): ...                     # rollouts left, or weight steps / search iterations

Two budget modes (`budget.mode`): `rollouts`, one rollout budget shared by weight training
and search; `weight_steps`, equal weight steps for every method with search counted on top
(a method whose row has `search_capped`, such as harness_only and the stagewise methods,
capped at `budget.search_iterations`). The phases charge what they sample as they sample
it and check that they can pay for their own next step; nothing here reads the disk.
"""

from __future__ import annotations

from collections.abc import Mapping

from whalekit.rollouts.budget import PROTOTYPE_PHASE, RSFT_PHASE, SEARCH_PHASE, RolloutBudget
from whalekit.run.config import RunConfig
from whalekit.run.methods import method
from whalekit.run.phases.base import Phase
from whalekit.run.state import RunState

LEDGER_ORDER = (RSFT_PHASE, SEARCH_PHASE, PROTOTYPE_PHASE)  # by_phase's keys in this order, then any other


class BudgetAccounting:
    """The run's budget rules over its `RolloutBudget` (shared with every phase)."""

    def __init__(self, config: RunConfig, budget: RolloutBudget, phases: Mapping[str, Phase]):
        self.config = config
        self.budget = budget
        self.phases = phases  # by Stage kind: "weight", "harness" (a method has one or both)
        self.search_capped = method(config.method).search_capped

    def total(self) -> int | None:
        """The rollout budget (None in weight_steps mode, where rollouts are counted, not capped)."""
        return self.budget.total if self.config.budget.mode == "rollouts" else None

    def left(self, state: RunState) -> bool:
        """rollouts mode: rollouts remain. weight_steps mode: weight steps remain (a capped
        search: proposer iterations), so a run ends after its last weight stage, as the authors' did."""
        if self.config.budget.mode == "rollouts":
            return self.budget.remaining > 0
        return self.weight_steps_left(state) or self.search_iterations_left(state)

    def goes_on(self, state: RunState) -> bool:
        """The run takes another step: budget is `left`, and in rollouts mode its last two
        stages did not both stall (every step empty). Empty search iterations cost no
        rollouts, so without that rule a proposer with nothing left to propose would loop for
        ever. In weight_steps mode the caps end the run, so a stalled stage counts like any
        other, as in the authors' search (its I iterations, empty or not): an LLM proposer
        whose candidates all failed validation in two rounds in a row keeps its remaining rounds."""
        if self.config.budget.mode == "rollouts" and state.stalled >= 2:
            return False
        return self.left(state)

    def may_step(self, kind: str, state: RunState) -> bool:
        """A phase of `kind` may take another step (its own check that it can pay for one follows)."""
        return self.weight_steps_left(state) if kind == "weight" else \
            not (self.config.budget.mode == "weight_steps" and self.search_capped) or self.search_iterations_left(state)

    def weight_steps_left(self, state: RunState) -> bool:
        """weight_steps mode: weight steps remain (always true in rollouts mode)."""
        if self.config.budget.mode == "rollouts":
            return True
        weight = self.phases.get("weight")
        return weight is not None and weight.steps_done(state) < self.config.budget.weight_steps

    def search_iterations_left(self, state: RunState) -> bool:
        """weight_steps mode: proposer iterations remain for a method whose search is capped."""
        if self.config.budget.mode == "rollouts":
            return True
        return self.search_capped and state.search_iterations < self.config.budget.search_iterations

    def restore(self, state: RunState) -> None:
        """A resumed run's spent rollouts, as its phases committed them (the trainer's
        checkpoint, the committed search count), so it starts its next stage exactly where
        the uninterrupted run did."""
        spent: dict[str, int] = {}
        for phase in self.phases.values():
            spent.update(phase.spent(state))
        order = [p for p in LEDGER_ORDER if p in spent] + [p for p in spent if p not in LEDGER_ORDER]
        self.budget.by_phase = {p: spent[p] for p in order}
        self.budget.spent = sum(spent.values())

    def work_done(self, state: RunState) -> tuple[int, int, str]:
        """(done, total, unit) of the run's work: rollouts against the budget, or in
        weight_steps mode (rollouts uncapped) weight steps, or a search-only method's iterations."""
        if self.config.budget.mode == "rollouts":
            return self.budget.spent, self.budget.total, "rollouts"
        weight = self.phases.get("weight")
        if weight is not None:
            return weight.steps_done(state), self.config.budget.weight_steps, "weight steps"
        return state.search_iterations, self.config.budget.search_iterations, "search iterations"
