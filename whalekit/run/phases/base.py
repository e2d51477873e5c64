"""What the driver needs of a phase: one step at a time (`Phase`), what a step did
(`StepRecord`), and a weight phase's epochs in steps (`WeightPhase`). Any object with these
members fits (RSFTPhase, SearchPhase, a test double); mypy checks each caller against them.

    record = phase.step(state, stage)    # None: no step could run
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from whalekit.run.schedules import Stage
    from whalekit.run.state import RunState


@dataclass
class StepRecord:
    """What one step of a phase did, for the driver to log and the schedule to watch."""

    event: str  # the run event it logs: "rsft_batch", "search_iteration"
    fields: dict[str, Any]  # that event's fields after phase_step and rollouts
    signal: float  # what the adaptive rule watches: the batch's training reward, the best search score
    changed: bool  # the agent may have changed (False: a search iteration that evaluated no new candidate)



class Phase(Protocol):
    """One kind of stage ("weight": a weight update such as RSFT; "harness": the harness
    search), driven one step at a time. A phase charges the rollouts it samples to the run's
    budget as it samples them; whether a step may start at all is the budget's
    (whalekit.run.budget_accounting), whether the step is affordable is the phase's own."""

    kind: str  # "weight" | "harness": the Stage kind it runs

    def step(self, state: RunState, stage: Stage) -> StepRecord | None:
        """One step of the running stage (an RSFT batch, a search iteration), recorded in
        `state`; None when none could run (the budget cannot pay for it)."""
        ...

    def resume(self, state: RunState) -> None:
        """Pick up a killed run from its committed state (the trainer's checkpoint)."""
        ...

    def spent(self, state: RunState) -> dict[str, int]:
        """Rollouts this phase has spent over the run, by budget phase (what a resumed run restores)."""
        ...

    def steps_done(self, state: RunState) -> int:
        """Steps this phase has taken over the run (weight steps, search iterations)."""
        ...

    def stage_signal(self, state: RunState) -> float | None:
        """The stage line's signal at the end of a stage of this kind (None: none yet)."""
        ...

    def committed(self, state: RunState) -> None:
        """The run committed `state`: what the phase kept only for an earlier state can go
        (RSFT: older checkpoints)."""
        ...

    def close(self) -> None: ...



class WeightPhase(Phase, Protocol):
    """A weight phase (kind "weight", a `WEIGHT_UPDATES` entry): its stages are measured in
    epochs of the training set, which it takes a batch per step."""

    def epoch_steps(self, epochs: float) -> int:
        """`epochs` of the training set in this phase's steps, at least one (0 stays 0): how
        the stage rules measure the adaptive rule's windows of a weight stage."""
        ...
