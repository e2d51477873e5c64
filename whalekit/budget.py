"""The one rollout budget that training and harness search both draw from.

Every sampled trajectory in RSFT or search is charged exactly once, before it is
sampled; test evaluation is never charged. Overspending is an error, not a warning.

    budget = RolloutBudget(total=4096)
    budget.charge(64, phase="rsft")
"""

from __future__ import annotations

from dataclasses import dataclass, field


class BudgetExceeded(RuntimeError):
    pass


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
