"""The harness phase as the driver steps it: one Meta-Harness search iteration per step
(one step of a one-iteration whalekit.search.stage `SearchStage`, the step `run_search_stage`
repeats), on the archive of the running harness phase, with a proposer made for the step,
its outcome as the `search_iteration` event.

    phase = SearchPhase(parts)                 # parts: whalekit.run.parts.RunParts
    record = phase.step(state, stage)          # StepRecord("search_iteration", ...), or None

The rollouts a step spends are what it charged to the budget; the archive on disk is read
only at the first step after a resume, to charge what a killed attempt at that very step had
already recorded (the search does not redo those evaluations).
"""

from __future__ import annotations

import dataclasses

from whalekit.rollouts.budget import PROTOTYPE_PHASE, RSFT_PHASE, SEARCH_PHASE
from whalekit.run.methods import method
from whalekit.run.parts import RunParts
from whalekit.run.phases.base import StepRecord
from whalekit.run.schedules import Stage
from whalekit.run.state import RunState
from whalekit.search.archive import Archive, archive_folders, round_folder
from whalekit.search.proposers.base import ProposerLike
from whalekit.search.proposers.prototype import prototype_rollouts
from whalekit.search.proposers.registry import make_proposer
from whalekit.search.stage import SearchStage


class SearchPhase:
    """Meta-Harness search over the run's harness archives, one iteration per step."""

    kind = "harness"

    def __init__(self, parts: RunParts):
        self.parts = parts
        self.config = parts.config.search
        self.budget = parts.budget
        self.sampler = parts.policy.sampler
        self.archive_root = parts.harnesses.archive_root
        self.prompt_only = method(parts.config.method).prompt_only  # FST: the proposer edits prompt text only
        self.resumed = False  # a resumed run: its first step charges what a killed attempt recorded (`reconcile`)
        self.archive: Archive | None = None  # the archive of the current harness phase (`open_archive`)
        if self.config.archive_scope == "run":
            self.archive = Archive.open(self.archive_root, parts.domain.name)
            self.archive.ensure_seed(parts.harnesses.h0_source)

    def step(self, state: RunState, stage: Stage) -> StepRecord | None:
        """One search iteration of the running harness stage; None when none could run."""
        parts = self.parts
        if self.budget.remaining < len(parts.splits.search):
            return None
        before = state.search_rollouts  # as committed before this step began
        archive = self.open_archive(state)
        self.reconcile(state)
        spent_before = self.budget.spent
        # A one-iteration stage per driver step: one step of it re-scores (at a new weights
        # version) and runs its iteration, or finishes what a killed attempt at this step left.
        one = dataclasses.replace(self.config, iterations=1)
        search = SearchStage(parts.domain, archive, self.proposer(archive, state.step), self.sampler,
                             parts.splits.search, self.budget, one, weights_version=self.sampler.version,
                             seed=parts.config.seed, step=state.step, settings=parts.settings)
        search.step()
        accepted = search.accepted()
        state.search_rollouts += self.budget.spent - spent_before  # evaluations and prototype runs alike
        outcome = search.progress
        completed = outcome.get("iterations_done", 0) >= 1
        if not completed and state.search_rollouts == before:
            return None  # the budget could not cover the iteration
        # An iteration that evaluated no new candidate (none proposed, all invalid, or only the
        # incoming harness re-scored before the budget ran out) still counts, as in the
        # authors' search: the stage goes on to its I iterations.
        empty = not outcome.get("candidates_evaluated", 0)
        state.stage_empty_steps += int(empty)
        if outcome.get("stopped") == "early_stop":
            state.stage_stop = "early_stop"
        state.accepted_id = accepted
        state.search_iterations = state.search_iterations + 1
        board = archive.leaderboard(self.sampler.version)
        best = board[0][1] if board else 0.0
        fields = {"weights_version": self.sampler.version, "accepted_id": accepted, "best_score": best,
                  "accepted_score": archive.entry(accepted).score(self.sampler.version),
                  "archive_size": len(archive), "candidates_evaluated": outcome.get("candidates_evaluated", 0),
                  "empty": empty, "early_stop": state.stage_stop == "early_stop"}
        return StepRecord("search_iteration", fields, signal=best, changed=not empty)

    def proposer(self, archive: Archive, step: int) -> ProposerLike:
        """A proposer per iteration, seeded by the step: a resumed run proposes what an
        uninterrupted one would have."""
        config = self.parts.config
        return make_proposer(config.proposer, self.parts.domain, archive, config.seed * 100_003 + step,
                             config.proposer_options, prompt_only=self.prompt_only,
                             initial_source=self.parts.harnesses.h0_source)

    def open_archive(self, state: RunState) -> Archive:
        """The archive this harness stage searches. `run` scope: the run's one archive.
        `round` scope: a fresh archive per harness phase (a phase starts after every weight
        stage; harness_only has one), seeded with the incoming harness."""
        if self.config.archive_scope == "run" and self.archive is not None:  # opened with the run
            return self.archive
        phase = sum(1 for h in state.history if h["kind"] == "weight")
        root = round_folder(self.archive_root, phase)
        if self.archive is None or self.archive.root != root:
            self.archive = Archive.open(root, self.parts.domain.name)
            self.archive.ensure_seed(self.parts.harnesses.source(state.accepted_id),
                                     hypothesis="the incoming harness")
        return self.archive

    def recorded_rollouts(self) -> tuple[int, int]:
        """(all, prototype) search rollouts the run's archives record on disk: candidate
        evaluations and an LLM proposer's finished prototype runs, both charged to the budget."""
        archives = [Archive.open(folder, self.parts.domain.name) for folder in archive_folders(self.archive_root)]
        evaluated = sum(int(score["n"]) for a in archives for e in a.entries() for score in e.scores.values())
        prototyped = prototype_rollouts(self.archive_root)
        return evaluated + prototyped, prototyped

    def reconcile(self, state: RunState) -> None:
        """Before a step: the budget's ledger lists the weight and search phases (zero
        included; the shape of every record's `by_phase`). At the first step after a resume,
        the rollouts a killed attempt at this very step recorded in the archive beyond the
        committed count are charged, since the search stage does not redo them."""
        for name in (RSFT_PHASE, SEARCH_PHASE):
            self.budget.by_phase.setdefault(name, 0)
        if not self.resumed:
            return
        self.resumed = False
        recorded, prototyped = self.recorded_rollouts()
        extra = recorded - state.search_rollouts
        if extra > 0:
            extra_prototyped = min(extra, max(0, prototyped - self.budget.by_phase.get(PROTOTYPE_PHASE, 0)))
            self.budget.charge(extra - extra_prototyped, SEARCH_PHASE)
            if extra_prototyped:
                self.budget.charge(extra_prototyped, PROTOTYPE_PHASE)
            state.search_rollouts = recorded

    def resume(self, state: RunState) -> None:
        self.resumed = True

    def spent(self, state: RunState) -> dict[str, int]:
        """The committed search rollouts, the prototype runs' share of them apart."""
        prototyped = min(state.search_rollouts, prototype_rollouts(self.archive_root))
        spent = {SEARCH_PHASE: state.search_rollouts - prototyped}
        return {**spent, PROTOTYPE_PHASE: prototyped} if prototyped else spent

    def steps_done(self, state: RunState) -> int:
        return state.search_iterations

    def stage_signal(self, state: RunState) -> float | None:
        """The best search-split score at the end of the stage."""
        return state.stage_signals[-1] if state.stage_signals else None

    def committed(self, state: RunState) -> None:
        pass

    def close(self) -> None:
        pass
