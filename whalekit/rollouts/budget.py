"""What a run may spend: one shared rollout budget (`mode: rollouts`), or the authors'
equal number of weight-update steps with the harness search on top (`mode: weight_steps`).

Every sampled trajectory in RSFT or search is charged exactly once, before it is
sampled, in either mode; test evaluation is never charged. Overspending is an error.

    budget = RolloutBudget(total=4096)
    budget.charge(64, phase="rsft")
"""

from __future__ import annotations

from dataclasses import dataclass, field


class BudgetExceeded(RuntimeError):
    pass


BUDGET_MODES = ("rollouts", "weight_steps")
# The budget phases: every charge names the phase it pays for (RolloutBudget.by_phase)
RSFT_PHASE = "rsft"  # weight training's sampled batches
SEARCH_PHASE = "search"  # the harness search's candidate evaluations
PROTOTYPE_PHASE = "prototype"  # an LLM proposer's prototype runs of drafts (whalekit.search.proposers.prototype)
UNBOUNDED = 2**62  # the rollout total of a weight_steps run: rollouts are counted, not capped


@dataclass
class BudgetConfig:
    # rollouts: every method shares one budget of sampled rollouts, training and search alike
    # (what the paper's figures put on the x-axis). weight_steps: every weight-training method
    # gets the same number of RSFT batches and the harness search comes on top, as the
    # authors' launchers ran it (the run ends after the last weight stage).
    mode: str = "rollouts"  # rollouts | weight_steps
    rollouts: int = 1024  # rollouts mode: total rollouts for training + search (test evaluation is free)
    weight_steps: int = 0  # weight_steps mode: RSFT sampled batches (the authors' trainer global steps)
    search_iterations: int = 0  # weight_steps mode: proposer iterations of harness_only (it trains nothing)

    def __post_init__(self) -> None:
        if self.mode not in BUDGET_MODES:
            raise ValueError(f"budget.mode {self.mode!r}: use one of {', '.join(BUDGET_MODES)}")
        if self.mode == "rollouts" and self.rollouts <= 0:
            raise ValueError("budget.rollouts must be positive in rollouts mode")
        if self.mode == "weight_steps" and self.weight_steps <= 0:
            raise ValueError("budget.weight_steps must be positive in weight_steps mode")
        if min(self.rollouts, self.weight_steps, self.search_iterations) < 0:
            raise ValueError("budget sizes must be non-negative")

    @property
    def rollout_total(self) -> int:
        return self.rollouts if self.mode == "rollouts" else UNBOUNDED


@dataclass
class RolloutBudget:
    total: int  # rollouts the whole run may sample (training + search)
    spent: int = 0
    by_phase: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 0 or self.spent < 0:
            raise ValueError("budget total and spent must be non-negative")

    @property
    def remaining(self) -> int:
        return self.total - self.spent

    def can_afford(self, n: int) -> bool:
        return n <= self.remaining

    def charge(self, n: int, phase: str) -> None:
        if n < 0:
            raise ValueError("cannot charge a negative number of rollouts")
        if n > self.remaining:
            raise BudgetExceeded(f"{phase} asked for {n} rollouts with {self.remaining} of {self.total} left")
        self.spent += n
        self.by_phase[phase] = self.by_phase.get(phase, 0) + n

    def to_json(self) -> dict:
        return {"total": self.total, "spent": self.spent, "by_phase": dict(self.by_phase)}

    @classmethod
    def from_json(cls, data: dict) -> RolloutBudget:
        return cls(int(data["total"]), int(data["spent"]), dict(data.get("by_phase", {})))
