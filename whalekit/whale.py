"""The WHALE driver: alternate RSFT stages and harness-search stages under one rollout
budget, evaluate on the test split at every stage boundary, and keep a run directory that
a killed run resumes from.

    config = resolve_config("smoke", domain="toy", method="whale", schedule="0.6,6")
    run = run_method(config)          # -> RunDir; run.events("test_eval")

`_Driver._execute` is the paper's Algorithm 1: evaluate the starting agent; then, while
budget is left, take the next stage from the schedule, run its steps (an RSFT batch, or one
harness-search iteration) until the stage is finished, close it and evaluate what changed;
finally evaluate the last agent. The parts it leans on live beside it: the configuration
(whalekit.config), the stage rules (whalekit.stage_scheduling), the budget accounting
(whalekit.budget_accounting) and the test evaluation (whalekit.evaluation).

Test tasks only ever go to `evaluate_test`, which charges nothing and writes nowhere a
proposer, trainer or schedule reads (enforced by construction: those components are given
`splits.train` / `splits.search` and the archive, never `splits.test`).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from whalekit import models
from whalekit.archive import Archive, archive_folders, round_folder
from whalekit.backends import make_backend
from whalekit.budget import RolloutBudget
from whalekit.budget_accounting import BudgetAccounting
from whalekit.config import (
    METHODS_ALL,
    PRESET_INITIAL_HARNESSES,
    SEARCH_CAPPED,
    SEARCH_METHODS,
    WEIGHT_METHODS,
    RunConfig,
    StaleRunError,
    check_not_stale,
    config_changes,
    resolve_config,
)
from whalekit.domains.base import get_domain
from whalekit.engine import HarnessRuntime, InProcessHarness
from whalekit.episode import harness_id
from whalekit.evaluation import Evaluator, evaluate_test, mean_at_k
from whalekit.isolation import IsolatedHarness
from whalekit.memory import release_freed_memory
from whalekit.progress import report, stage_line
from whalekit.proposers.registry import make_proposer
from whalekit.provenance import check_reuse, provenance
from whalekit.rsft import RSFTTrainer
from whalekit.run_state import RunState
from whalekit.runs import RunDir
from whalekit.sandbox import isolation_mode, set_isolation_mode
from whalekit.schedules import Schedule, Stage
from whalekit.search import run_search_stage, stage_outcome
from whalekit.stage_scheduling import StageScheduler
from whalekit.timing import PhaseClock, phase, recording, timed_log
from whalekit.tracking import attach, export_run

if TYPE_CHECKING:
    from whalekit.seams import PolicyLike, ProposerLike

__all__ = [  # the configuration and evaluation names are re-exported: callers import them from here
    "METHODS_ALL", "PRESET_INITIAL_HARNESSES", "SEARCH_CAPPED", "SEARCH_METHODS", "WEIGHT_METHODS", "RunConfig",
    "StaleRunError", "check_not_stale", "config_changes", "evaluate_test", "make_proposer",
    "mean_at_k", "per_turn_limit", "resolve_config", "run_method",
]


def per_turn_limit(h0_source: str, max_response_tokens: int | None) -> str:
    """The h0 with its per-turn `max_new_tokens` class attribute raised to the episode's
    response budget (theirs caps only the episode); unchanged without a budget, or for an
    h0 that sets no such attribute."""
    if max_response_tokens is None:
        return h0_source
    line = f"    max_new_tokens = {max_response_tokens}  # per turn: what the episode's response budget has left"
    return re.sub(r"^    max_new_tokens = \d+.*$", line, h0_source, count=1, flags=re.MULTILINE)



class _Driver:
    """One run's moving parts; `run_method` is the public entry point."""

    def __init__(self, config: RunConfig, policy: PolicyLike | None = None):
        self.config = config
        # The shared initial evaluation is only for a model the driver loads by name: a policy
        # handed in (tests, notebooks) is not known to be the one a stored evaluation came from.
        self.shares_initial_eval = config.share_initial_eval and policy is None
        # A policy the driver loads is the driver's to close (vLLM's engine process is shut down
        # while the run's process is healthy; left to interpreter exit it was seen to hang).
        self.owns_policy = policy is None and config.backend.kind != "ray"
        self.clock = PhaseClock()  # every event carries the phase seconds since the previous one
        self.run = RunDir(config.run_dir)
        self.domain = get_domain(config.domain, **config.domain_options)
        self.splits = self.domain.load_splits(n_train=config.n_train, n_search=config.n_search,
                                              n_test=config.n_test, seed=config.seed, **config.split_options)
        self.backend = None
        if policy is None and config.backend.kind == "ray":
            self.backend = make_backend(config.backend, model=config.model, sampler_kind=config.sampler,
                                        sampler_options=config.vllm_options if config.sampler != "hf" else {})
            policy = self.backend.policy()
        if policy is None:
            policy = models.load_policy(config.model, sampler=config.sampler, vllm_options=config.vllm_options) \
                if config.sampler != "hf" else models.load_policy(config.model)
        self.policy = policy
        self.sampler = policy.sampler
        self.sampler.max_new_tokens_cap = config.max_new_tokens_cap
        self.sampler.max_response_tokens = config.max_response_tokens
        self.run.log = timed_log(self.run, self.clock, self.sampler)  # type: ignore[method-assign]
        self.budget = RolloutBudget(config.budget.rollout_total)
        self.h0_source = per_turn_limit(self.domain.initial_harness_source(config.initial_harness),
                                        config.max_response_tokens)
        self.seed_id = harness_id(self.h0_source)  # h0: shipped with whalekit, the only trusted harness
        self.archive_root = self.run.root / "archive"
        self.archive: Archive | None = None  # the archive of the current harness phase (opened by `open_archive`)
        if config.search.archive_scope == "run":
            self.archive = Archive.open(self.archive_root, self.domain.name)
            self.archive.ensure_seed(self.h0_source)
        self.trainer = None
        if config.method in WEIGHT_METHODS:
            self.trainer = RSFTTrainer(policy, self.domain, self.splits.train, config.rsft, self.budget)
        epochs, iterations = config.schedule
        self.schedule = Schedule(config.method, epochs, iterations, config.stagewise_split, config.adaptive,
                                 config.search.count_incoming)
        self.accounting = BudgetAccounting(config, self.budget, self.trainer, self.archive_root, self.domain.name)
        self.stages = StageScheduler(config, self.schedule, self.accounting, n_train=len(self.splits.train))
        self.evaluator = Evaluator(config, self.run, self.domain, self.splits.test, self.sampler, self.seed_id,
                                   self.shares_initial_eval)
        self._runtimes: dict[str, HarnessRuntime] = {}
        self._resumed_at: tuple[int, float] = (0, time.monotonic())  # (work done, when) as this process began
        self.tracker = attach(self.run, config.tracking)  # sends every committed event to the enabled sinks

    # -- Algorithm 1 ----------------------------------------------------------------------
    def execute(self) -> RunDir:
        with recording(self.clock):  # components mark their phases on this clock
            return self._execute()

    def _execute(self) -> RunDir:
        """Start (or resume) the run, then Algorithm 1: stages until the budget is spent."""
        committed = self.run.state()
        state = RunState.from_json(committed) if committed else RunState.fresh(self.seed_id)
        if state.finished:
            return self.run
        if committed:
            self.run.roll_back_uncommitted_events()
            if self.trainer is not None and state.checkpoint:
                self.trainer.load_checkpoint(Path(state.checkpoint))
            self.accounting.restore(state.search_rollouts)
        else:
            self.run.events_path.unlink(missing_ok=True)  # a start killed before its first commit
            self.run.write_config({**self.config.to_json(),
                                   "provenance": provenance(self.config.sampler, self.sampler)})
            self.run.log("run_start", rollouts=0, budget=self.accounting.total(), budget_mode=self.config.budget.mode,
                         weight_steps=self.config.budget.weight_steps, method=self.config.method,
                         schedule=list(self.config.schedule), domain=self.config.domain, seed=self.config.seed,
                         n_train=len(self.splits.train), n_search=len(self.splits.search), n_test=len(self.splits.test))
            self.evaluate(state, "initial")
            self.commit(state)
        self._resumed_at = (self.accounting.work_done(state)[0], time.monotonic())  # the stage lines' rate starts here
        try:
            while state.stalled < 2 and self.accounting.left(state):
                if state.stage is None:
                    history = state.history
                    stage = self.stages.next_stage(state)
                    state.begin_stage(asdict(stage), self.budget.spent)
                    self.run.log("stage_start", kind=stage.kind, stage=len(history), rollouts=self.budget.spent,
                                 epochs=stage.epochs, iterations=stage.iterations, adaptive=stage.adaptive)
                assert state.stage is not None
                stage = Stage(**state.stage)
                progressed = self.weight_step(state, stage) if stage.kind == "weight" else self.harness_step(state)
                if progressed:
                    state.stage_steps += 1
                    state.step += 1
                if not progressed or self.stages.finished(state, stage):
                    self.end_stage(state, stage)
                self.commit(state)
            if state.stage is not None:  # the budget ran out in the middle of a stage: close it
                self.end_stage(state, Stage(**state.stage), budget_exhausted=True)
                self.commit(state)
            # "final" is what the run ends with: evaluated after the last rollout, at eval_k.
            if self.changed_since_evaluation(state) or self.run.events("test_eval")[-1]["k"] != self.config.eval_k:
                self.evaluate(state, "final")
                self.commit(state)
            evals = self.run.events("test_eval")
            best = max(evals, key=lambda e: e["mean_at_k"])
            self.run.log("run_end", rollouts=self.budget.spent, budget=self.accounting.total(),
                         best_mean_at_k=best["mean_at_k"], best_at_rollouts=best["rollouts"],
                         final_mean_at_k=evals[-1]["mean_at_k"], accepted_id=state.accepted_id,
                         by_phase=self.budget.by_phase, wall_s=time.time() - state.started)
            state.finished = True
            self.commit(state)
        finally:
            self.close()
        return self.run

    def weight_step(self, state: RunState, stage: Stage) -> bool:
        """One RSFT batch of the running weight stage; False when none could be trained."""
        assert self.trainer is not None
        goal = round(stage.epochs * len(self.splits.train)) if not stage.adaptive else None
        left = self.config.rsft.batch_problems if goal is None else goal - state.stage_problems
        n = min(left, self.config.rsft.batch_problems, self.budget.remaining // self.config.rsft.samples_per_problem)
        if n <= 0 or not self.accounting.weight_steps_left():
            return False
        record = self.trainer.step(self.runtime(state.accepted_id), n)
        checkpoint = self.run.root / "checkpoints" / f"rsft-{self.trainer.state.batches:05d}"
        with phase("checkpoint"):
            self.trainer.save_checkpoint(checkpoint)
        state.checkpoint = str(checkpoint)
        state.stage_problems += n
        state.stage_signals.append(record.reward)  # the adaptive rule windows these per stage
        self.run.log("rsft_batch", phase_step=state.step, rollouts=self.budget.spent, **asdict(record))
        return True

    def harness_step(self, state: RunState) -> bool:
        """One harness-search iteration of the running harness stage; False when none could run."""
        if self.budget.remaining < len(self.splits.search):
            return False
        if self.config.budget.mode == "weight_steps" and self.config.method in SEARCH_CAPPED \
                and not self.accounting.search_iterations_left(state):
            return False
        before = state.search_rollouts  # as committed before this step began
        archive = self.open_archive(state)
        self.accounting.restore(self.accounting.archive_rollouts())
        one = dataclasses.replace(self.config.search, iterations=1)
        # A proposer per iteration, seeded by the step: a resumed run proposes what an
        # uninterrupted one would have.
        proposer = self._make_proposer(archive, state.step)
        accepted = run_search_stage(self.domain, archive, proposer, self.sampler, self.splits.search,
                                    self.budget, one, weights_version=self.sampler.version, seed=self.config.seed,
                                    step=state.step)
        # The archive is the durable record of what search sampled, including evaluations a
        # killed attempt at this very step had already written.
        state.search_rollouts = self.accounting.archive_rollouts()
        self.accounting.restore(state.search_rollouts)
        outcome = stage_outcome(archive, state.step, self.sampler.version)
        completed = outcome.get("iterations_done", 0) >= 1
        if not completed and state.search_rollouts == before:
            return False  # the budget could not cover the iteration
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
        state.stage_signals.append(best)
        self.run.log("search_iteration", phase_step=state.step, rollouts=self.budget.spent,
                     weights_version=self.sampler.version, accepted_id=accepted, best_score=best,
                     accepted_score=archive.entry(accepted).score(self.sampler.version),
                     archive_size=len(archive), candidates_evaluated=outcome.get("candidates_evaluated", 0),
                     empty=empty, early_stop=state.stage_stop == "early_stop")
        return True

    def end_stage(self, state: RunState, stage: Stage, budget_exhausted: bool = False) -> None:
        """Close the running stage: history, stall count, `stage_end`, and a test evaluation
        when it changed something (a step that was not an empty search iteration)."""
        fields = self.stages.close(state, stage, self.budget.spent, budget_exhausted)
        self.run.log("stage_end", kind=stage.kind, stage=len(state.history) - 1, rollouts=self.budget.spent,
                     **fields)
        self.report_stage(state, stage.kind)
        # The run's last stage is left to the final evaluation (at eval_k) when the ones between
        # take fewer samples.
        productive = state.stage_steps - state.stage_empty_steps
        last = state.stalled >= 2 or not self.accounting.left(state)
        if not (last and self.evaluator.samples("between") < self.config.eval_k) \
                and (productive or (state.stage_steps and self.changed_since_evaluation(state))):
            self.evaluate(state, f"after {stage.kind} stage")
        state.stage = None

    def changed_since_evaluation(self, state: RunState) -> bool:
        """The weights or the accepted harness differ from those of the last test evaluation."""
        last = self.run.events("test_eval")[-1]
        return (last["weights_version"], last["accepted_id"]) != (self.sampler.version, state.accepted_id)

    def evaluate(self, state: RunState, reason: str) -> None:
        """A test evaluation of the current weights and accepted harness (whalekit.evaluation)."""
        self.evaluator.evaluate(state, reason, self.runtime, self.budget.spent)
        release_freed_memory()  # the evaluation's trajectories and sampler buffers: freed heap goes back


    # -- archives, harness runtimes, commits ----------------------------------------------
    def open_archive(self, state: RunState) -> Archive:
        """The archive this harness stage searches. `run` scope: the run's one archive.
        `round` scope: a fresh archive per harness phase (a phase starts after every weight
        stage; harness_only has one), seeded with the incoming harness."""
        if self.config.search.archive_scope == "run" and self.archive is not None:  # opened with the run
            return self.archive
        phase = sum(1 for h in state.history if h["kind"] == "weight")
        root = round_folder(self.archive_root, phase)
        if self.archive is None or self.archive.root != root:
            self.archive = Archive.open(root, self.domain.name)
            self.archive.ensure_seed(self.source(state.accepted_id), hypothesis="the incoming harness")
        return self.archive

    def source(self, candidate_id: str) -> str:
        if candidate_id == self.seed_id:
            return self.h0_source
        for folder in archive_folders(self.archive_root):
            path = folder / "candidates" / candidate_id / "harness.py"
            if path.exists():
                return path.read_text(encoding="utf-8")
        raise KeyError(f"no harness {candidate_id!r} in {self.archive_root}")

    def _make_proposer(self, archive: Archive, step: int = 0) -> ProposerLike:
        return make_proposer(self.config.proposer, self.domain, archive, self.config.seed * 100_003 + step,
                             self.config.proposer_options, prompt_only=self.config.method == "fst",
                             initial_source=self.h0_source)

    def runtime(self, candidate_id: str) -> HarnessRuntime:
        if candidate_id not in self._runtimes:
            source = self.source(candidate_id)
            if candidate_id == self.seed_id:
                self._runtimes[candidate_id] = InProcessHarness(source, candidate_id)  # shipped with whalekit: trusted
            else:
                # respawn: a candidate that becomes the accepted harness serves every later stage, so a
                # dead worker is replaced (its in-flight episodes end as recorded failures)
                self._runtimes[candidate_id] = IsolatedHarness(source, self.config.search.limits(), candidate_id,
                                                               respawn=True)
        return self._runtimes[candidate_id]

    def close(self) -> None:
        for runtime in self._runtimes.values():
            if hasattr(runtime, "close"):
                runtime.close()
        if self.backend is not None:
            self.backend.close()
        if self.tracker is not None:
            self.tracker.close()
        if self.owns_policy and hasattr(self.sampler, "close"):
            self.sampler.close()

    def commit(self, state: RunState) -> None:
        self.run.commit(state.to_json())
        keep = state.checkpoint
        folder = self.run.root / "checkpoints"
        if folder.exists():
            for old in folder.iterdir():
                if str(old) != keep:
                    shutil.rmtree(old, ignore_errors=True)

    def report_stage(self, state: RunState, kind: str) -> None:
        """One line for the stage just finished: kind, work done / total, its signal (the
        training reward window, as rsft_batch logs it, or the best search score), elapsed
        and ETA at the rate measured since this process began (or resumed) the run."""
        signal: float | None = None
        if kind == "harness" and state.stage_signals:
            signal = state.stage_signals[-1]
        elif kind == "weight" and self.trainer is not None and self.trainer.state.rewards:
            window = self.trainer.state.rewards[-self.config.rsft.reward_window:]
            signal = sum(window) / len(window)
        done, total, unit = self.accounting.work_done(state)
        done_at_start, started = self._resumed_at
        report(stage_line(kind, len(state.history) - 1, done, total, signal, time.monotonic() - started,
                          done_at_start, unit=unit))

def run_method(config: RunConfig, policy: PolicyLike | None = None, reuse_foreign: bool | None = None) -> RunDir:
    """Run (or resume, or reuse when finished) one (domain, method, schedule, seed) run.
    A run made by other code or another sampler is refused unless `reuse_foreign`
    (or WHALEKIT_REUSE_FOREIGN_RUNS=1), see whalekit.provenance."""
    check_not_stale(config)
    if RunDir(config.run_dir).config_path.exists():  # provenance hashes the package and asks git: only to compare
        check_reuse(config.run_dir, provenance(config.sampler, policy.sampler if policy is not None else None),
                    reuse_foreign)
    if config.isolation != isolation_mode():
        set_isolation_mode(config.isolation)  # "none" warns loudly; the value is in the run's config.json
    run = RunDir(config.run_dir)
    if run.done:
        export_run(run.root, config.tracking)  # a reused run still reaches sinks switched on since
        return run
    return _Driver(config, policy).execute()
