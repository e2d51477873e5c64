"""Budget accounting for one run: what the run may still spend, what it has done, and the
spent count restored from the durable records (trainer checkpoint, archives) on resume.

    accounting = BudgetAccounting(config, budget, trainer, archive_root, domain_name)
    while accounting.left(state): ...                 # rollouts left, or weight steps / search iterations

Two budget modes (`budget.mode`): `rollouts`, one rollout budget shared by weight training
and search; `weight_steps`, equal RSFT batches for every method with search counted on top
(`harness_only` and the stagewise methods capped at `budget.search_iterations`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whalekit.archive import Archive, archive_folders
from whalekit.budget import RolloutBudget
from whalekit.config import SEARCH_CAPPED, RunConfig
from whalekit.proposers.prototype import BUDGET_PHASE, prototype_rollouts
from whalekit.run_state import RunState


class BudgetAccounting:
    """The run's budget rules over its `RolloutBudget` (shared with the trainer and the search)."""

    def __init__(self, config: RunConfig, budget: RolloutBudget, trainer: Any, archive_root: Path, domain_name: str):
        self.config = config
        self.budget = budget
        self.trainer = trainer  # the RSFT trainer, None for a method that trains no weights
        self.archive_root = archive_root
        self.domain_name = domain_name

    def total(self) -> int | None:
        """The rollout budget (None in weight_steps mode, where rollouts are counted, not capped)."""
        return self.budget.total if self.config.budget.mode == "rollouts" else None

    def left(self, state: RunState) -> bool:
        """rollouts mode: rollouts remain. weight_steps mode: RSFT batches remain (harness_only:
        proposer iterations), so a run ends after its last weight stage, as the authors' did."""
        if self.config.budget.mode == "rollouts":
            return self.budget.remaining > 0
        return self.weight_steps_left() or self.search_iterations_left(state)

    def weight_steps_left(self) -> bool:
        """weight_steps mode: RSFT batches remain (always true in rollouts mode)."""
        if self.config.budget.mode == "rollouts":
            return True
        return self.trainer is not None and self.trainer.state.batches < self.config.budget.weight_steps

    def search_iterations_left(self, state: RunState) -> bool:
        """weight_steps mode: proposer iterations remain for a method whose search is capped."""
        if self.config.budget.mode == "rollouts":
            return True
        return self.config.method in SEARCH_CAPPED and \
            state.search_iterations < self.config.budget.search_iterations

    def archive_rollouts(self) -> int:
        """Search rollouts recorded in every archive of the run (all rounds): candidate
        evaluations and an LLM proposer's prototype runs alike, both charged to the budget."""
        archives = [Archive.open(folder, self.domain_name) for folder in archive_folders(self.archive_root)]
        evaluated = sum(int(score["n"]) for a in archives for e in a.entries() for score in e.scores.values())
        return evaluated + prototype_rollouts(self.archive_root)

    def restore(self, search_rollouts: int) -> None:
        """Rollouts spent: what the loaded trainer checkpoint sampled plus `search_rollouts`
        (evaluations and prototype runs). A resumed run restores the committed count, so it
        starts its next stage exactly where the uninterrupted run did; a harness step then
        charges, as it begins, the evaluations a killed attempt at that very step had already
        recorded in the archive (the search stage does not redo them), so neither run spends
        more than the other."""
        spent_rsft = self.trainer.state.sampled if self.trainer else 0
        self.budget.spent = spent_rsft + search_rollouts
        prototyped = min(search_rollouts, prototype_rollouts(self.archive_root))
        self.budget.by_phase = {"rsft": spent_rsft, "search": search_rollouts - prototyped}
        if prototyped:
            self.budget.by_phase[BUDGET_PHASE] = prototyped

    def work_done(self, state: RunState) -> tuple[int, int, str]:
        """(done, total, unit) of the run's work: rollouts against the budget, or in
        weight_steps mode (rollouts uncapped) weight steps, or harness_only's search iterations."""
        if self.config.budget.mode == "rollouts":
            return self.budget.spent, self.budget.total, "rollouts"
        if self.trainer is not None:
            return self.trainer.state.batches, self.config.budget.weight_steps, "weight steps"
        return state.search_iterations, self.config.budget.search_iterations, "search iterations"
