"""The seams between whalekit's parts, as Protocols: what the driver needs of a phase (one
step at a time, `Phase`, and what a step did, `StepRecord`; a weight phase's epochs in steps,
`WeightPhase`), what the search stage needs of
a proposer, what the ledger reads of an archive, what the engine and samplers need of a
tokenizer, and what the trainer needs of a policy and of a sampler that takes LoRA
adapters. Any object with these members fits (a real part, a test double), no subclassing;
mypy checks each caller against them. The sampler itself has its nominal interface,
`whalekit.samplers.base.Sampler`, which every sampler subclasses.

    record = phase.step(state, stage)    # Phase: RSFTPhase, SearchPhase; None: no step could run
    def run_search_stage(domain, archive, proposer: ProposerLike, sampler: Sampler, ...): ...
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from whalekit.archive import Archive, Entry
    from whalekit.budget import RolloutBudget
    from whalekit.proposers.base import Candidate
    from whalekit.run_state import RunState
    from whalekit.samplers.base import Sampler
    from whalekit.schedules import Stage


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
    (whalekit.budget_accounting), whether the step is affordable is the phase's own."""

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


class TokenizerLike(Protocol):
    """A tokenizer as the engine and samplers use it (transformers', or a test's)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = ...,
                            tokenize: bool = ..., return_dict: bool = ...) -> Any: ...


class ProposerLike(Protocol):
    """What a search stage asks of a proposer (whalekit.proposers.base.Proposer, a wrapper
    such as PromptOnly, a test's scripted one)."""

    name: str

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]: ...


class ArchiveLike(Protocol):
    """The read side of a harness archive that the proposer ledger's reports use."""

    root: Path

    def entries(self) -> list[Entry]: ...

    def __contains__(self, candidate_id: object) -> bool: ...

    def entry(self, candidate_id: str) -> Entry: ...

    def seed_id(self) -> str: ...

    def leaderboard(self, weights_version: int | None = None) -> list[tuple[str, float, int]]: ...


class PolicyLike(Protocol):
    """What the trainer needs of a policy (whalekit.models.Policy): the weights' folder, the
    tokenizer and the sampler that receives the trained weights."""

    @property
    def path(self) -> Path: ...

    @property
    def tokenizer(self) -> Any: ...  # a transformers tokenizer: pad_token_id, chat template

    @property
    def sampler(self) -> Sampler: ...


class AdapterSampler(Protocol):
    """A sampler that applies LoRA adapters at run time (vLLM started with `lora_rank`): the
    trainer hands it the adapter instead of merged weights."""

    lora_rank: int
    base_modified: bool  # the base weights were overwritten: adapters no longer apply to them

    def load_lora_adapter(self, folder: Path) -> None: ...
