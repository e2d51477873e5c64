"""One Meta-Harness search stage: I iterations, each asking a proposer for M candidate
harnesses, validating them, and evaluating the valid ones with real rollouts on the
harness-search split (one rollout per candidate-problem), all candidates of an
iteration batched through one `rollout` call and charged to the shared budget first.

Why stages: WHALE alternates weight and harness phases, so the archive's scores go
stale when the weights change. A stage therefore starts by re-scoring the accepted
harness and the top few with the new weights (charged too); the proposer's report then
shows which problems the new weights solve or lose. The accepted harness is always the
archive's best by search-split score at the current weights version; test tasks never
reach the archive. Every evaluation is written to the archive as it finishes and an
iteration's proposals are stored before they are evaluated, so a stage killed at any
point resumes by reopening the archive and calling `run_search_stage` again. A stage is a
`SearchStage` stepped one iteration at a time, by `run_search_stage` to its end and by the
driver's harness phase (whalekit.run.phases.search) one driver step at a time.

    config = SearchConfig(iterations=6, candidates_per_iteration=3)
    accepted = run_search_stage(domain, archive, ReflectiveProposer(domain.mechanisms()), policy.sampler,
                                splits.search, budget, config, weights_version=0, seed=0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from whalekit.domains.base import Domain
from whalekit.infra.timing import phase
from whalekit.rollouts.budget import SEARCH_PHASE, RolloutBudget
from whalekit.rollouts.engine import Episode, RolloutConfig, RolloutSettings, rollout
from whalekit.samplers.base import Sampler, SamplingParams
from whalekit.sandbox.isolation import IsolatedHarness, IsolationLimits, validate_candidate
from whalekit.search.archive import ARCHIVE_SCOPES, Archive
from whalekit.search.proposers.base import ProposerLike
from whalekit.search.proposers.prototype import Prototyper
from whalekit.types import Task


@dataclass
class SearchConfig:
    iterations: int = 6  # proposer iterations this call of run_search_stage runs
    # (E, I) counting in the driver: True (the authors') = I includes the incoming harness's
    # evaluation as iteration 1, so a harness stage runs I - 1 proposer iterations; False = I.
    count_incoming: bool = True
    # Which candidates compete: "round" (the authors') = a fresh archive each harness phase,
    # seeded with the incoming harness; "run" = one archive for the run, re-scoring the
    # accepted harness and the top few whenever the weights changed.
    archive_scope: str = "round"  # round | run
    candidates_per_iteration: int = 3  # M: candidates asked of the proposer per iteration (the authors' 3)
    rescore_top: int = 3  # re-score accepted + top-k at stage start when the weights changed
    # Accept and end the stage at once when one of an iteration's candidates reaches this
    # success rate on the search split (the authors' chess search: 1.0); 0 = off.
    early_stop_success_rate: float = 0.0
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the evaluation rollouts' (T 1, top_k 20)
    max_context_tokens: int = 4096  # per-episode context limit in evaluation rollouts
    hook_timeout_s: float = 5.0  # wall-clock limit per harness hook call in a worker
    memory_mb: int = 1024  # address-space limit of a worker

    def __post_init__(self) -> None:
        if self.iterations < 0 or self.candidates_per_iteration < 1 or self.rescore_top < 0:
            raise ValueError("iterations >= 0, candidates_per_iteration >= 1 and rescore_top >= 0 are required")
        self.sampling = SamplingParams.of(self.sampling)
        if self.max_context_tokens <= 0:
            raise ValueError("max_context_tokens must be positive")
        if not 0 <= self.early_stop_success_rate <= 1:
            raise ValueError("early_stop_success_rate must lie in [0, 1] (0: off)")
        if self.archive_scope not in ARCHIVE_SCOPES:
            raise ValueError(f"archive_scope {self.archive_scope!r}: use one of {', '.join(ARCHIVE_SCOPES)}")
        IsolationLimits(self.hook_timeout_s, memory_mb=self.memory_mb)  # checks the limits

    def limits(self) -> IsolationLimits:
        return IsolationLimits(hook_timeout_s=self.hook_timeout_s, memory_mb=self.memory_mb)

    def proposer_iterations(self, iterations: int) -> int:
        """Proposer iterations of a harness stage of I = `iterations`: I - 1 under the
        authors' counting (`count_incoming`), else I."""
        return iterations - 1 if self.count_incoming else iterations


def evaluate_candidates(domain: Domain, archive: Archive, candidate_ids: list[str], sampler: Sampler,
                        tasks: list[Task], budget: RolloutBudget, config: SearchConfig, weights_version: int,
                        seed: int, step: int, settings: RolloutSettings | None = None) -> dict[str, float]:
    """Score candidates on `tasks` in one batched rollout (charged first) and record them."""
    if not candidate_ids:
        return {}
    budget.charge(len(candidate_ids) * len(tasks), SEARCH_PHASE)
    runtimes: dict[str, IsolatedHarness] = {}
    try:
        for cid in candidate_ids:
            source = archive.source(cid)
            runtimes[cid] = IsolatedHarness(source, config.limits(), cid)  # never in the driver's process
        episodes = [Episode(task, runtimes[cid], k) for cid in candidate_ids for k, task in enumerate(tasks)]
        trajectories = rollout(domain, episodes, sampler, RolloutConfig(
            sampling=config.sampling, seed=seed, step=step,
            max_context_tokens=config.max_context_tokens,
            description=f"search: {len(candidate_ids)} candidates"), policy_version=weights_version,
            settings=settings)
    finally:
        for runtime in runtimes.values():
            if isinstance(runtime, IsolatedHarness):
                runtime.close()
    scores = {}
    for i, cid in enumerate(candidate_ids):
        chunk = trajectories[i * len(tasks):(i + 1) * len(tasks)]
        modes = [domain.failure_mode(t) for t in chunk]
        failure = getattr(runtimes[cid], "failure", None)
        scores[cid] = archive.record_evaluation(cid, weights_version, chunk, modes, failure)
    return scores


def _to_rescore(archive: Archive, weights_version: int, top: int) -> list[str]:
    """Accepted + top-k at the newest older version; the seed when nothing was ever scored."""
    latest = archive.latest_weights_version()
    if latest is None:
        return [archive.seed_id()]
    ids = [archive.accepted(latest)] + [cid for cid, _, _ in archive.leaderboard(latest)[:top]]
    if weights_version not in archive.entry(archive.seed_id()).scores and latest != weights_version:
        ids.append(archive.seed_id())  # keep h0 as the reference at every weights version
    unique = list(dict.fromkeys(ids))
    return [cid for cid in unique if weights_version not in archive.entry(cid).scores]


def _give_prototyper(proposer: ProposerLike, domain: Domain, sampler: Sampler, search_tasks: list[Task],
                     budget: RolloutBudget, archive: Archive, config: SearchConfig, weights_version: int,
                     seed: int, settings: RolloutSettings | None = None) -> None:
    """LLM proposers get a prototyping tool where the domain allows it (the authors' proposers
    run code through Bash in search QA and math, not in chess): drafts run on search problems
    in the sandbox, charged to the budget (phase "prototype"); it also limits their run view
    to these tasks."""
    target = getattr(proposer, "inner", proposer)
    if not hasattr(target, "prototyper") or not getattr(domain, "proposer_prototyping", True):
        return  # chess: the authors' proposer cannot run code, so whalekit's gets no prototype tool
    target.prototyper = Prototyper(domain, sampler, search_tasks, budget, archive.root, weights_version, seed,
                                   config.limits(), sampling=config.sampling,
                                   max_context_tokens=config.max_context_tokens, settings=settings)


class SearchStage:
    """One search stage (the re-scoring at its weights version, then `config.iterations`
    proposer iterations), taken a step at a time: `run_search_stage` steps it to its end, the
    driver's harness phase (whalekit.run.phases.search) steps a one-iteration stage per driver
    step. Its progress is recorded in the archive under (`step`, `weights_version`) after
    every change, so a stage made again on the reopened archive resumes where a kill left it.

        stage = SearchStage(domain, archive, proposer, sampler, splits.search, budget, config, 0, seed=0)
        while stage.step(): ...
    """

    def __init__(self, domain: Domain, archive: Archive, proposer: ProposerLike, sampler: Sampler,
                 search_tasks: list[Task], budget: RolloutBudget, config: SearchConfig, weights_version: int,
                 seed: int, step: int = 0, settings: RolloutSettings | None = None):
        if not search_tasks:
            raise ValueError("run_search_stage needs at least one search task")
        archive.seed_id()  # clear error when the archive was not seeded
        self.domain, self.archive, self.proposer, self.sampler = domain, archive, proposer, sampler
        self.tasks, self.budget, self.config, self.weights_version = search_tasks, budget, config, weights_version
        self.seed, self.number, self.settings = seed, step, settings
        self.key = _stage_key(step, weights_version)
        # iterations_done, rescored, rollouts; candidates_evaluated (proposer candidates, the
        # re-scored harnesses not counted) and `stopped` ("budget", "early_stop") as they happen
        self.progress: dict[str, Any] = archive.stage_progress(self.key) or {"iterations_done": 0, "rescored": False,
                                                                             "rollouts": 0}
        self.probe = search_tasks[0].view()
        self._armed = False  # the proposer got its prototyping tool and dry run

    def over(self) -> bool:
        """It stopped early, or its re-scoring and iterations are done (a budget stop is not
        final: a stage made again later, with budget, goes on)."""
        return self.progress.get("stopped") == "early_stop" or (
            self.progress["rescored"] and self.progress["iterations_done"] >= self.config.iterations)

    def accepted(self) -> str:
        """The accepted harness at the stage's weights version: the archive's best."""
        return self.archive.accepted(self.weights_version)

    def step(self, on_iteration: Callable[[dict[str, Any]], None] | None = None) -> bool:
        """The stage's next step: the re-scoring that opens it (at the first step), then its
        next proposer iteration. True when another step follows; False when the stage is over
        or the budget could not cover an evaluation (its progress then says "budget").

        Candidates that fail validation or crash are recorded and the stage goes on; a
        `ProposerError` (no API key, endpoint down after retries) propagates, since the stage
        cannot continue without its proposer."""
        if self.over():
            return False
        if not self._armed:
            self._arm()
        try:
            if not self.progress["rescored"]:
                self._evaluate(_to_rescore(self.archive, self.weights_version, self.config.rescore_top), 0)
                self.progress["rescored"] = True
                self.archive.set_stage_progress(self.key, self.progress)
            if self.progress["iterations_done"] < self.config.iterations:
                self._iteration(self.progress["iterations_done"], on_iteration)
        except _OutOfBudget:
            self.progress["stopped"] = "budget"
            self.archive.set_stage_progress(self.key, self.progress)
            return False
        return not self.over()

    def _arm(self) -> None:
        """Before the stage's first step in this process: the proposer's prototyping tool, and
        for a proposer that repairs its own candidates, the dry run's verdict."""
        _give_prototyper(self.proposer, self.domain, self.sampler, self.tasks, self.budget, self.archive, self.config,
                         self.weights_version, self.seed, self.settings)
        target = getattr(self.proposer, "inner", self.proposer)
        if hasattr(target, "dry_run"):
            probe, config = self.probe, self.config
            target.dry_run = lambda source: validate_candidate(source, probe, config.limits())
        self._armed = True

    def _evaluate(self, ids: list[str], call: int) -> None:
        """Evaluate what the budget covers of `ids`; _OutOfBudget when it covers not all."""
        n_tasks = len(self.tasks)
        affordable = ids[:self.budget.remaining // n_tasks]
        with phase("sample"):
            evaluate_candidates(self.domain, self.archive, affordable, self.sampler, self.tasks, self.budget,
                                self.config, self.weights_version, self.seed, self.number * 1000 + call, self.settings)
        self.progress["rollouts"] += len(affordable) * n_tasks
        if len(affordable) < len(ids):
            if call:  # a proposer iteration's candidates (call 0 re-scores the incoming harness)
                self.progress["candidates_evaluated"] = self.progress.get("candidates_evaluated", 0) + len(affordable)
            raise _OutOfBudget()

    def _iteration(self, iteration: int, on_iteration: Callable[[dict[str, Any]], None] | None) -> None:
        """Proposer iteration `iteration`: propose, validate, evaluate the valid candidates."""
        archive, progress, config, version = self.archive, self.progress, self.config, self.weights_version
        started = time.perf_counter()
        pending = archive.unevaluated(version)  # proposals stored before a kill
        # A kill after this iteration's evaluations were recorded but before it was
        # marked done: proposing again would spend rollouts an uninterrupted run never did.
        evaluated_before_kill = progress.get("evaluating") == iteration
        proposed = invalid = 0
        if not pending and not evaluated_before_kill:
            if not self.budget.can_afford(len(self.tasks)):
                raise _OutOfBudget()
            with phase("propose"):  # an LLM proposer's prototyping rollouts included
                for candidate in self.proposer.propose(archive, config.candidates_per_iteration, self.budget):
                    if candidate.source and archive.add(candidate.source, candidate.parent_ids, candidate.hypothesis,
                                                        candidate.change_summary, self.proposer.name, iteration) \
                            in archive.unevaluated(version):
                        proposed += 1
            pending = archive.unevaluated(version)
        valid = []
        for cid in pending:
            problem = validate_candidate(archive.source(cid), self.probe, config.limits())
            if problem:
                archive.mark_invalid(cid, problem)
                invalid += 1
            else:
                valid.append(cid)
        if not evaluated_before_kill:
            progress["evaluating_ids"] = valid  # this iteration's candidates, kept across a kill
        progress["evaluating"] = iteration
        archive.set_stage_progress(self.key, progress)
        self._evaluate(valid, iteration + 1)
        candidates = list(progress.get("evaluating_ids", valid))
        progress["iterations_done"] = iteration + 1
        progress["candidates_evaluated"] = progress.get("candidates_evaluated", 0) + len(candidates)
        threshold = config.early_stop_success_rate
        if threshold and any((archive.entry(cid).score(version) or 0.0) >= threshold for cid in candidates):
            progress["stopped"] = "early_stop"
        archive.set_stage_progress(self.key, progress)
        if on_iteration:
            board = archive.leaderboard(version)
            on_iteration({"iteration": iteration, "step": self.number, "weights_version": version,
                          "candidates_proposed": proposed, "candidates_invalid": invalid,
                          "candidates_evaluated": len(valid), "best_score": board[0][1] if board else None,
                          "accepted_id": archive.accepted(version), "rollouts_spent": progress["rollouts"],
                          "budget_spent": self.budget.spent, "wall_s": time.perf_counter() - started})


def run_search_stage(domain: Domain, archive: Archive, proposer: ProposerLike, sampler: Sampler,
                     search_tasks: list[Task], budget: RolloutBudget, config: SearchConfig, weights_version: int,
                     seed: int, step: int = 0, on_iteration: Callable[[dict[str, Any]], None] | None = None,
                     settings: RolloutSettings | None = None) -> str:
    """Run (or resume) one search stage, its `SearchStage` stepped to the end; return the
    accepted harness id at `weights_version`. `settings`: the run's generation limits and
    rollout backend, for every rollout it makes. Running out of budget ends the stage cleanly."""
    stage = SearchStage(domain, archive, proposer, sampler, search_tasks, budget, config, weights_version, seed, step,
                        settings)
    while stage.step(on_iteration):
        pass
    return stage.accepted()


def _stage_key(step: int, weights_version: int) -> str:
    return f"step{step}-w{weights_version}"


class _OutOfBudget(Exception):
    """The budget cannot cover another candidate's evaluation: end the stage cleanly."""
