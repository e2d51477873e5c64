"""The proposer's prototyping tool: run a draft harness on a few search problems, behind
the isolation layer, with the current weights, and show the model what happened.

Why: the paper's proposer tries a change before it submits it. A draft runs exactly as a
candidate would (an `IsolatedHarness` worker in the sandbox, the batched rollout engine,
the domain's verifier), its rollouts are charged to the shared budget first (phase
"prototype") and every run is recorded under `<archive>/prototypes/<p>/` (source,
trajectories, and `summary.json` written last), so the run view shows it to later
sessions and `prototype_rollouts` lets a resumed run restore what it spent. Drafts
failing static validation are refused before anything is charged.

    prototype = Prototyper(domain, policy.sampler, splits.search, budget, archive.root, weights_version=0)
    run = prototype(source, n=2); print(run.report())
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain
from whalekit.episode import harness_id
from whalekit.infra.runs import atomic_write
from whalekit.rollouts.budget import PROTOTYPE_PHASE, RolloutBudget
from whalekit.rollouts.engine import Episode, RolloutConfig, RolloutSettings, rollout
from whalekit.samplers.base import Sampler, SamplingParams
from whalekit.sandbox.isolation import IsolatedHarness, IsolationLimits, validate_source
from whalekit.search.archive import archive_folders
from whalekit.search.proposers.runview import PROTOTYPES_DIR, render_trajectory
from whalekit.types import Task, Trajectory

SCHEMA_VERSION = 1


@dataclass
class PrototypeRun:
    prototype_id: str | None  # folder name under prototypes/; None when nothing ran
    harness_id: str
    trajectories: list[Trajectory] = field(default_factory=list)
    failure_modes: list[str | None] = field(default_factory=list)
    refused: str | None = None  # why it did not run (validation, budget)
    worker_failure: str | None = None

    @property
    def score(self) -> float | None:
        return sum(t.reward for t in self.trajectories) / len(self.trajectories) if self.trajectories else None

    def report(self, trace_chars: int = 1500) -> str:
        if self.refused:
            return f"not run: {self.refused}"
        lines = [f"prototype {self.prototype_id} of draft {self.harness_id}: score {self.score:.3f} on "
                 f"{len(self.trajectories)} search problems ({len(self.trajectories)} rollouts charged)"]
        if self.worker_failure:
            lines.append(f"worker failure: {self.worker_failure}")
        for traj, mode in zip(self.trajectories, self.failure_modes):
            text = render_trajectory(traj)
            cut = text if len(text) <= trace_chars else text[:trace_chars] + " …[cut; read the file]"
            lines.append(f"\n## {traj.task_id}: {'correct' if traj.correct else mode}\n{cut}")
        lines.append(f"\nFull traces: {PROTOTYPES_DIR}/{self.prototype_id}/trajectories/")
        return "\n".join(lines)


class Prototyper:
    """A callable the agent loop receives: `prototype(source, n, task_ids=None) -> PrototypeRun`."""

    def __init__(self, domain: Domain, sampler: Sampler, tasks: list[Task], budget: RolloutBudget,
                 archive_root: str | Path, weights_version: int = 0, seed: int = 0,
                 limits: IsolationLimits | None = None, max_problems: int = 8, sampling: SamplingParams | None = None,
                 max_context_tokens: int = 4096, settings: RolloutSettings | None = None):
        if not tasks or max_problems < 1:
            raise ValueError("the prototyper needs search tasks and max_problems >= 1")
        self.domain, self.sampler, self.tasks, self.budget = domain, sampler, list(tasks), budget
        self.root = Path(archive_root) / PROTOTYPES_DIR
        self.weights_version, self.seed = weights_version, seed
        self.limits = limits or IsolationLimits()
        self.max_problems = max_problems  # problems one call may run
        self.sampling = sampling or SamplingParams()  # as the search's evaluations
        self.max_context_tokens = max_context_tokens
        self.settings = settings  # the run's generation limits and rollout backend
        self.session: dict[str, Any] = {}  # who is calling (proposer, call), recorded with each run

    @property
    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def __call__(self, source: str, n: int = 2, task_ids: list[str] | None = None) -> PrototypeRun:
        hid = harness_id(source)
        problem = validate_source(source)
        if problem:
            return PrototypeRun(None, hid, refused=f"validation: {problem}")
        if task_ids:
            by_id = {t.id: t for t in self.tasks}
            unknown = [t for t in task_ids if t not in by_id]
            if unknown:
                return PrototypeRun(None, hid, refused=f"unknown search task ids {unknown[:5]}")
            chosen = [by_id[t] for t in task_ids][:self.max_problems]
        else:
            chosen = self.tasks[:max(1, min(int(n), self.max_problems, len(self.tasks)))]
        if not self.budget.can_afford(len(chosen)):
            return PrototypeRun(None, hid, refused=f"the rollout budget has {self.budget.remaining} rollouts left, "
                                                   f"{len(chosen)} asked")
        self.budget.charge(len(chosen), PROTOTYPE_PHASE)
        number = len([p for p in self.root.iterdir()]) if self.root.is_dir() else 0
        prototype_id = f"p{number:04d}"
        runtime = IsolatedHarness(source, self.limits, hid)  # never in the driver's process
        try:
            trajectories = rollout(self.domain, [Episode(t, runtime, 0) for t in chosen], self.sampler, RolloutConfig(
                sampling=self.sampling, seed=self.seed,
                step=50_000_000 + number, max_context_tokens=self.max_context_tokens, progress=False,
                description="prototype"),
                policy_version=self.weights_version, settings=self.settings)
        finally:
            runtime.close()
        modes = [self.domain.failure_mode(t) for t in trajectories]
        run = PrototypeRun(prototype_id, hid, trajectories, modes, worker_failure=runtime.failure)
        folder = self.root / prototype_id
        atomic_write(folder / "harness.py", source)
        atomic_write(folder / "trajectories.jsonl",
                     "".join(json.dumps(t.to_json(), default=str) + "\n" for t in trajectories))
        outcomes = [{"task_id": t.task_id, "correct": t.correct, "reward": t.reward, "failure_mode": m,
                     "final_answer": t.final_answer, "error": (t.error or None) and t.error[:300]}
                    for t, m in zip(trajectories, modes)]
        atomic_write(folder / "summary.json", json.dumps({  # last: a folder without it is not a finished run
            "schema_version": SCHEMA_VERSION, "id": prototype_id, "harness_id": hid, "rollouts": len(chosen),
            "task_ids": [t.id for t in chosen], "score": run.score, "weights_version": self.weights_version,
            "worker_failure": runtime.failure, "outcomes": outcomes, "created": time.time(), **self.session},
            indent=1, default=str))
        return run


def prototype_rollouts(archive_root: str | Path) -> int:
    """Rollouts spent on finished prototype runs under an archive, or under every round
    archive of a run's `archive/` folder: what a resumed run adds to the budget it restores
    from the archive."""
    total = 0
    for folder in archive_folders(archive_root) or [Path(archive_root)]:
        root = Path(folder) / PROTOTYPES_DIR
        for summary in sorted(root.glob("*/summary.json")) if root.is_dir() else []:
            total += int(json.loads(summary.read_text(encoding="utf-8")).get("rollouts", 0))
    return total
