"""Test evaluation: mean@k over the test split with the current weights and accepted harness,
charged to no budget, and the driver's evaluation step (the initial one shared across the
methods of a (domain, seed) through whalekit.run.initial_eval).

    trajectories = evaluate_test(domain, harness, sampler, tasks, k=8, sampling=SamplingParams(), seed=0, index=0)
    metrics = mean_at_k(trajectories, domain)     # {"mean_at_k", "by_subset", "behaviour"}

Test tasks only ever go to `evaluate_test`, which charges nothing and writes nowhere a
proposer, trainer or schedule reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain
from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.runs import RunDir
from whalekit.infra.timing import phase
from whalekit.rollouts.engine import Episode, HarnessRuntime, RolloutConfig, RolloutSettings, rollout
from whalekit.run.config import RunConfig
from whalekit.run.initial_eval import InitialEvalStore, initial_eval_key, store_folder
from whalekit.run.provenance import resolved_sampler, source_sha256
from whalekit.run.state import RunState
from whalekit.samplers.base import Sampler, SamplingParams
from whalekit.types import Task, Trajectory


def mean_at_k(trajectories: list[Trajectory], domain: Domain) -> dict[str, Any]:
    """Test metrics of one evaluation: mean accuracy over k samples per problem, per
    sub-dataset, and the mean of every numeric behaviour flag."""
    by_subset: dict[str, list[float]] = {}
    flags: dict[str, list[float]] = {}
    for t in trajectories:
        by_subset.setdefault(t.subset, []).append(float(t.correct))
        for key, value in t.flags.items():
            if isinstance(value, (bool, int, float)) and value is not None:
                flags.setdefault(key, []).append(float(value))
    mean = sum(float(t.correct) for t in trajectories) / max(1, len(trajectories))
    return {"mean_at_k": mean, "by_subset": {k: sum(v) / len(v) for k, v in sorted(by_subset.items())},
            "behaviour": {k: sum(v) / len(v) for k, v in sorted(flags.items())}}


def evaluate_test(domain: Domain, harness: HarnessRuntime, sampler: Sampler, tasks: list[Task], k: int,
                  sampling: SamplingParams, seed: int, index: int,
                  settings: RolloutSettings | None = None) -> list[Trajectory]:
    """k rollouts per test task with the current weights and accepted harness; never charged.
    `settings`: the run's generation limits and rollout backend."""
    episodes = [Episode(task, harness, i) for task in tasks for i in range(k)]
    return rollout(domain, episodes, sampler, RolloutConfig(sampling=sampling,
                                                            seed=seed + 7_777_777, step=index,
                                                            description=f"test eval {index}"), settings=settings)



class Evaluator:
    """One run's test evaluations, `eval-000` (initial) onwards: each logs a `test_eval`
    event; the driver counts it in `state.evaluations`."""

    def __init__(self, config: RunConfig, run: RunDir, domain: Domain, tasks: list[Task], sampler: Sampler,
                 seed_id: str, shares_initial_eval: bool, settings: RolloutSettings | None = None):
        self.config = config
        self.run = run
        self.domain = domain
        self.tasks = tasks  # the test split
        self.sampler = sampler
        self.seed_id = seed_id  # the starting harness
        self.shares_initial_eval = shares_initial_eval
        self.settings = settings  # the run's generation limits and rollout backend
        self._initial_inputs: dict[str, Any] = {}

    def samples(self, reason: str) -> int:
        """Samples per test problem: eval_k for the initial and the final evaluation (the
        table's numbers), eval_k_intermediate (when set) for those between."""
        if reason in ("initial", "final") or self.config.eval_k_intermediate is None:
            return self.config.eval_k
        return self.config.eval_k_intermediate

    def initial_eval_store(self) -> InitialEvalStore | None:
        """Where this run's initial evaluation is shared with the other methods of its
        (domain, seed), or None when it is not shared (see whalekit.run.initial_eval)."""
        if not self.shares_initial_eval:
            return None
        c = self.config
        asked = {
            "domain": c.domain, "domain_options": c.domain_options, "split_options": c.split_options,
            "n_test": c.n_test, "seed": c.seed, "harness_id": self.seed_id, "model": c.model,
            "sampler": resolved_sampler(c.sampler, self.sampler), "vllm_options": c.vllm_options, "k": c.eval_k,
            "temperature": c.eval_sampling.temperature, "top_p": c.eval_sampling.top_p, "top_k": c.eval_sampling.top_k,
            "max_new_tokens_cap": c.max_new_tokens_cap, "max_response_tokens": c.max_response_tokens}
        made_by = {"source_sha256": source_sha256(), "cpu_kind": cpu_kind()}
        if c.initial_eval_store is not None:  # the set's one evaluation, whichever code and machine made it
            self._initial_inputs = {**asked, "made_by": made_by}
            key = f"s{c.seed}-{initial_eval_key(asked)}"
            return InitialEvalStore(store_folder(c.initial_eval_store) / c.domain, key, shared=False)
        self._initial_inputs = {**asked, **made_by}
        return InitialEvalStore(Path(c.runs_root), initial_eval_key(self._initial_inputs))

    def evaluate(self, state: RunState, reason: str, runtime: Callable[[str], HarnessRuntime], rollouts: int) -> None:
        """Evaluate the accepted harness (`runtime(state.accepted_id)`) at `rollouts` spent as
        evaluation number `state.evaluations`; the initial evaluation is copied from the shared
        store when it holds it. Reads `state`, writes none of it."""
        started = time.perf_counter()
        index, k = state.evaluations, self.samples(reason)
        store = self.initial_eval_store() if index == 0 else None
        if store is not None and store.load() is not None:
            metrics = store.copy_to(self.run.root / "test" / f"eval-{index:03d}.jsonl")
        else:
            with phase("test_eval"):
                trajectories = evaluate_test(self.domain, runtime(state.accepted_id), self.sampler,
                                             self.tasks, k, self.config.eval_sampling,
                                             self.config.seed, index, self.settings)
            path = self.run.write_trajectories(f"eval-{index:03d}", trajectories)
            metrics = mean_at_k(trajectories, self.domain)
            if store is not None:
                store.save(path, metrics, self._initial_inputs)
        self.run.log("test_eval", index=index, reason=reason, rollouts=rollouts,
                     weights_version=self.sampler.version, accepted_id=state.accepted_id, k=k,
                     n_tasks=len(self.tasks), stages_done=len(state.history),
                     wall_s=time.perf_counter() - started, **metrics)
