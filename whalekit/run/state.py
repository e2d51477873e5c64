"""The driver's committed run state (state.json) as a typed, versioned record instead of
a dict of loose keys: what a killed run resumes from.

The driver (whalekit.run.driver) is its one writer outside a phase's step: the stage rules
(stage_scheduling) and the test evaluation (evaluation) read it and report what the driver
records. Schema 2 is this dataclass, what the driver commits and resumes from; schema 1
was the driver's former plain dict (plus `events_committed` that `RunDir.commit` adds),
which `from_json` still reads, so runs made before the switch resume and count as finished.

    state = RunState.fresh(accepted_id=seed_id)
    run.commit(state.to_json()); RunState.from_json(run.state())
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass
class RunState:
    accepted_id: str = ""  # the harness every rollout of the current step uses ("" only before a run starts)
    step: int = 0  # phase steps done (one RSFT batch or one search iteration each)
    stage: dict[str, Any] | None = None  # the running stage (schedules.Stage as a dict); None between stages
    stage_steps: int = 0  # steps done in the running stage
    stage_problems: int = 0  # training problems consumed in the running weight stage
    stage_signals: list[float] = field(default_factory=list)  # per step: training reward or best search score
    stage_rollouts_start: int = 0  # rollouts spent when the running stage began
    stage_empty_steps: int = 0  # search iterations of the running stage that evaluated no new candidate
    stage_stop: str = ""  # why the running stage ends before its length ("early_stop"), "" otherwise
    history: list[dict[str, Any]] = field(default_factory=list)  # finished stages: {kind, rollouts, steps}
    evaluations: int = 0  # test evaluations done (the next one's index)
    checkpoint: str | None = None  # the RSFT checkpoint folder this state belongs to
    stalled: int = 0  # consecutive stages that made no progress (two end the run)
    finished: bool = False
    started: float = 0.0  # wall-clock start of the run (time.time())
    search_rollouts: int = 0  # rollouts search has spent, as the archive records them
    search_iterations: int = 0  # search iterations done over the run
    events_committed: int = 0  # event lines that belong to this state (set by RunDir.commit)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        counts = ("step", "stage_steps", "stage_problems", "stage_rollouts_start", "stage_empty_steps", "evaluations",
                  "stalled",
                  "search_rollouts", "search_iterations", "events_committed")
        negative = [name for name in counts if int(getattr(self, name)) < 0]
        if negative:
            raise ValueError(f"run state: {', '.join(negative)} must not be negative")
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"RunState is schema {SCHEMA_VERSION}; read older states with RunState.from_json")
        self.stage_signals = [float(s) for s in self.stage_signals]

    @classmethod
    def fresh(cls, accepted_id: str, now: float | None = None) -> RunState:
        """The state of a run about to start: h0 accepted, nothing done."""
        return cls(accepted_id=accepted_id, started=time.time() if now is None else now)

    def begin_stage(self, stage: dict[str, Any], rollouts_spent: int) -> None:
        """Start the stage `stage` (schedules.Stage as a dict) with `rollouts_spent` spent so far."""
        self.stage, self.stage_steps, self.stage_problems = dict(stage), 0, 0
        self.stage_signals, self.stage_rollouts_start = [], rollouts_spent
        self.stage_empty_steps, self.stage_stop = 0, ""

    def end_stage(self, kind: str, rollouts_spent: int) -> None:
        """Record the running stage (of `kind`) as finished with `rollouts_spent` spent so far:
        its history entry, and the stall count (a stage whose every step was empty stalls)."""
        productive = self.stage_steps - self.stage_empty_steps
        self.history.append({"kind": kind, "rollouts": rollouts_spent - self.stage_rollouts_start,
                             "steps": self.stage_steps})
        self.stalled = 0 if productive else self.stalled + 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        """Read schema 2, or schema 1 (the driver's old dict; keys it lacks take their
        defaults). Unknown keys are an error: a state this code does not understand must
        not be resumed as if it did."""
        data = dict(data)
        version = int(data.pop("schema_version", 1))
        if version not in READABLE_VERSIONS:
            raise ValueError(f"run state schema {version}: this whalekit reads {READABLE_VERSIONS}")
        known = {f.name for f in fields(cls)} - {"schema_version"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"run state (schema {version}) has unknown keys {unknown}")
        return cls(**data)
