"""The WHALE driver, the paper's Algorithm 1 (`_Driver.algorithm_1`): after the initial
evaluation, while the budget has room, take the stage the schedule gives, step its phase
(`run.phases.base.Phase`: an RSFT batch, a search iteration), log the step, close the stage when it
is finished and evaluate what changed, commit; finally evaluate the last agent. A killed
run resumes from its run directory. The phases (run.phases.rsft, .search; which: the
method's row), the stage rules (stage_scheduling) and the budget's (budget_accounting) live
beside it; they report, and the driver writes the run state (a phase's step records its own
step). Test tasks only reach `evaluate_test`, which charges nothing and writes nowhere a
phase or the schedule reads.

    config = resolve_config("smoke", domain="toy", method="whale", schedule="0.6,6")
    run = run_method(config)          # -> RunDir; run.events("test_eval")
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict

from whalekit.infra.memory import release_freed_memory
from whalekit.infra.progress import report, stage_line
from whalekit.infra.runs import RunDir
from whalekit.infra.timing import PhaseClock, recording, timed_log
from whalekit.infra.tracking import attach, export_run
from whalekit.run.budget_accounting import BudgetAccounting
from whalekit.run.config import RunConfig, StaleRunError, check_not_stale, config_changes, resolve_config
from whalekit.run.evaluation import Evaluator, evaluate_test, mean_at_k
from whalekit.run.methods import method
from whalekit.run.parts import RunParts, per_turn_limit
from whalekit.run.phases.base import Phase
from whalekit.run.phases.search import SearchPhase
from whalekit.run.phases.weight_updates import make_weight_update
from whalekit.run.provenance import check_reuse, provenance
from whalekit.run.schedules import Schedule, Stage
from whalekit.run.stage_scheduling import StageScheduler
from whalekit.run.state import RunState
from whalekit.samplers.base import PolicyLike
from whalekit.sandbox.bwrap import isolation_mode, set_isolation_mode

__all__ = ["RunConfig", "StaleRunError", "check_not_stale", "config_changes", "evaluate_test", "mean_at_k",
           "per_turn_limit", "resolve_config", "run_method"]  # the config and evaluation names: re-exported


class _Driver:
    """One run's moving parts; `run_method` is the public entry point."""

    def __init__(self, config: RunConfig, policy: PolicyLike | None = None):
        self.config = config
        # A policy handed in (tests, notebooks) is not known to be the one a shared initial
        # evaluation came from; one the driver loads is its to close (vLLM's engine process).
        shares_initial_eval = config.share_initial_eval and policy is None
        self.owns_policy = policy is None and config.backend.kind != "ray"
        self.clock = PhaseClock()  # every event carries the phase seconds since the previous one
        parts = RunParts.assemble(config, policy)
        self.run, self.budget, self.harnesses, self.backend = parts.run, parts.budget, parts.harnesses, parts.backend
        self.sampler = parts.policy.sampler
        self.run.log = timed_log(self.run, self.clock, self.sampler)  # type: ignore[method-assign]
        row = method(config.method)  # which phases: the method's row
        weight = make_weight_update(row.weight_update, parts) if row.trains_weights else None
        search = SearchPhase(parts) if row.searches else None
        self.phases: dict[str, Phase] = {phase.kind: phase for phase in (weight, search) if phase is not None}
        epochs, iterations = config.schedule
        schedule = Schedule(config.method, epochs, config.search.proposer_iterations(iterations),
                            config.stagewise_split, config.adaptive)
        self.accounting = BudgetAccounting(config, self.budget, self.phases)
        self.stages = StageScheduler(config, schedule, self.accounting, len(parts.splits.train), weight)
        self.evaluator = Evaluator(config, self.run, parts.domain, parts.splits.test, self.sampler,
                                   self.harnesses.seed_id, shares_initial_eval, parts.settings)
        self.splits = parts.splits
        self.tracker = attach(self.run, config.tracking)  # sends every committed event to the enabled sinks

    # -- Algorithm 1 ----------------------------------------------------------------------
    def execute(self) -> RunDir:
        """Start (or resume) the run, then Algorithm 1: stages until the budget is spent."""
        with recording(self.clock):  # components mark their phases on this clock
            state = self.start()
            if not state.finished:
                self.algorithm_1(state)
        return self.run

    def algorithm_1(self, state: RunState) -> None:
        try:
            while self.accounting.goes_on(state):
                if state.stage is None:
                    stage = self.stages.next_stage(state)
                    state.begin_stage(asdict(stage), self.budget.spent)
                    self.run.log("stage_start", kind=stage.kind, stage=len(state.history), rollouts=self.budget.spent,
                                 epochs=stage.epochs, iterations=stage.iterations, adaptive=stage.adaptive)
                assert state.stage is not None  # begun above, or resumed
                stage = Stage(**state.stage)
                record = self.phases[stage.kind].step(state, stage) \
                    if self.accounting.may_step(stage.kind, state) else None
                if record is not None:
                    state.stage_signals.append(record.signal)  # the adaptive rule windows these per stage
                    self.run.log(record.event, phase_step=state.step, rollouts=self.budget.spent, **record.fields)
                    state.stage_steps += 1
                    state.step += 1
                if record is None or self.stages.finished(state, stage):
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

    def start(self) -> RunState:
        """A killed run's committed state, phases and budget restored; or a new run's, initially evaluated."""
        committed = self.run.state()
        state = RunState.from_json(committed) if committed else RunState.fresh(self.harnesses.seed_id)
        if state.finished:
            return state
        if committed:
            self.run.roll_back_uncommitted_events()
            for phase in self.phases.values():
                phase.resume(state)
            self.accounting.restore(state)
        else:
            self.run.events_path.unlink(missing_ok=True)  # a start killed before its first commit
            self.run.write_config({**self.config.to_json(),
                                   "provenance": {**provenance(self.config.sampler, self.sampler),
                                                  "initial_harness_sha256":
                                                      hashlib.sha256(self.harnesses.h0_source.encode()).hexdigest()}})
            self.run.log("run_start", rollouts=0, budget=self.accounting.total(), budget_mode=self.config.budget.mode,
                         weight_steps=self.config.budget.weight_steps, method=self.config.method,
                         schedule=list(self.config.schedule), domain=self.config.domain, seed=self.config.seed,
                         n_train=len(self.splits.train), n_search=len(self.splits.search),
                         n_test=len(self.splits.test))
            self.evaluate(state, "initial")
            self.commit(state)
        # (work done, when) as this process began: the stage lines' rate starts here
        self._resumed_at: tuple[int, float] = (self.accounting.work_done(state)[0], time.monotonic())
        return state

    def end_stage(self, state: RunState, stage: Stage, budget_exhausted: bool = False) -> None:
        """Close the running stage: history, stall count, `stage_end`, and a test evaluation
        when it changed something (a step that was not an empty search iteration)."""
        state.end_stage(stage.kind, self.budget.spent)  # history and stall count
        fields = self.stages.stage_end(state, stage, budget_exhausted)
        self.run.log("stage_end", kind=stage.kind, stage=len(state.history) - 1, rollouts=self.budget.spent, **fields)
        done, total, unit = self.accounting.work_done(state)  # the stage line: ETA at this process's rate
        report(stage_line(stage.kind, len(state.history) - 1, done, total, self.phases[stage.kind].stage_signal(state),
                          time.monotonic() - self._resumed_at[1], self._resumed_at[0], unit=unit))
        # The run's last stage is left to the final evaluation (at eval_k) when the ones between take fewer samples.
        if self.evaluates_after_stage(state):
            self.evaluate(state, f"after {stage.kind} stage")
        state.stage = None

    def evaluates_after_stage(self, state: RunState) -> bool:
        """Whether the stage just ended is followed by a test evaluation (`RunConfig.eval_between`).
        The run's last stage is left to the final evaluation (at eval_k) when the ones between
        take fewer samples."""
        last = not self.accounting.goes_on(state)
        if self.config.eval_between == "none" or (last and self.evaluator.samples("between") < self.config.eval_k):
            return False
        if self.config.eval_between == "changed_agent":
            return self.changed_since_evaluation(state)
        productive = state.stage_steps - state.stage_empty_steps
        return bool(productive or (state.stage_steps and self.changed_since_evaluation(state)))

    def changed_since_evaluation(self, state: RunState) -> bool:
        """The weights or the accepted harness differ from those of the last test evaluation."""
        last = self.run.events("test_eval")[-1]
        return (last["weights_version"], last["accepted_id"]) != (self.sampler.version, state.accepted_id)

    def evaluate(self, state: RunState, reason: str) -> None:
        """A test evaluation of the current weights and accepted harness (whalekit.run.evaluation)."""
        self.evaluator.evaluate(state, reason, self.harnesses.runtime, self.budget.spent)
        state.evaluations += 1
        release_freed_memory()  # the evaluation's trajectories and sampler buffers: freed heap goes back

    def commit(self, state: RunState) -> None:
        """state.json and the events it covers; then the phases drop what only an older state needed."""
        self.run.commit(state.to_json())
        for phase in self.phases.values():
            phase.committed(state)

    def close(self) -> None:
        for part in (*self.phases.values(), self.harnesses, self.backend, self.tracker):
            if part is not None:
                part.close()
        if self.owns_policy and hasattr(self.sampler, "close"):
            self.sampler.close()


def run_method(config: RunConfig, policy: PolicyLike | None = None, reuse_foreign: bool | None = None) -> RunDir:
    """Run (or resume, or reuse when finished) one (domain, method, schedule, seed) run.
    A run made by other code or another sampler is refused unless `reuse_foreign`
    (or WHALEKIT_REUSE_FOREIGN_RUNS=1), see whalekit.run.provenance."""
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
