"""The parts one run shares between its phases and its test evaluation: the configuration,
run directory, domain and splits, policy (and the Ray backend it may run on), rollout budget
and rollout settings, and the run's harnesses (`RunHarnesses`: h0's source, every candidate's
source in the run's archives, one runtime per harness). The driver (whalekit.run.driver) assembles
them once and hands them to each phase it makes (whalekit.run.phases.weight_updates, whalekit.run.phases.search).

    parts = RunParts.assemble(config, policy=None)    # loads the domain, its splits and the model
    runtime = parts.harnesses.runtime(state.accepted_id)   # h0 in this process, a candidate sandboxed
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain, Splits, get_domain
from whalekit.episode import harness_id
from whalekit.infra.errors import DataError
from whalekit.infra.runs import RunDir
from whalekit.rollouts.backends import backend_of, make_backend
from whalekit.rollouts.budget import RolloutBudget
from whalekit.rollouts.engine import HarnessRuntime, InProcessHarness, RolloutSettings
from whalekit.run.config import RunConfig
from whalekit.samplers import models
from whalekit.samplers.base import PolicyLike
from whalekit.sandbox.isolation import IsolatedHarness, IsolationLimits, validate_candidate
from whalekit.search.archive import archive_folders


def per_turn_limit(h0_source: str, max_response_tokens: int | None) -> str:
    """The h0 with its per-turn `max_new_tokens` class attribute raised to the episode's
    response budget (theirs caps only the episode); unchanged without a budget, or for an
    h0 that sets no such attribute. This is what the starting harness asks for (its source,
    and so its id); the budget itself reaches a turn through RolloutSettings alone."""
    if max_response_tokens is None:
        return h0_source
    line = f"    max_new_tokens = {max_response_tokens}  # per turn: what the episode's response budget has left"
    return re.sub(r"^    max_new_tokens = \d+.*$", line, h0_source, count=1, flags=re.MULTILINE)


class HarnessFileError(DataError):
    """`initial_harness` names a .py file that is missing or fails validation."""


def initial_harness_source(domain: Domain, name: str, splits: Splits, limits: IsolationLimits) -> str:
    """The starting harness's source: a harness the domain ships (`h0`, `h0_cpu`, ...), or a
    `.py` file of your own, validated as a proposed candidate is (static checks, then a dry
    episode in a sandboxed worker on a training task) before the run starts."""
    if not name.endswith(".py"):
        return domain.initial_harness_source(name)
    path = Path(name).expanduser()
    if not path.is_file():
        raise HarnessFileError.at(path, None, "no such harness file (initial_harness is a shipped harness name "
                                              "such as h0, or the path of a .py file)")
    source = path.read_text(encoding="utf-8")
    problem = validate_candidate(source, (splits.train or splits.search or splits.test)[0].view(), limits)
    if problem:
        raise HarnessFileError.at(path, None, f"not a valid starting harness: {problem}")
    return source


class RunHarnesses:
    """The run's harnesses by id: h0 (shipped with whalekit, the only trusted harness, run in
    this process) and the candidates its archives hold (each in a sandboxed worker)."""

    def __init__(self, h0_source: str, archive_root: Path, limits: IsolationLimits):
        self.h0_source = h0_source
        self.seed_id = harness_id(h0_source)
        self.archive_root = archive_root  # every archive of the run lies under it (archive_folders)
        self.limits = limits
        self._runtimes: dict[str, HarnessRuntime] = {}

    def source(self, candidate_id: str) -> str:
        if candidate_id == self.seed_id:
            return self.h0_source
        for folder in archive_folders(self.archive_root):
            path = folder / "candidates" / candidate_id / "harness.py"
            if path.exists():
                return path.read_text(encoding="utf-8")
        raise KeyError(f"no harness {candidate_id!r} in {self.archive_root}")

    def runtime(self, candidate_id: str) -> HarnessRuntime:
        if candidate_id not in self._runtimes:
            source = self.source(candidate_id)
            if candidate_id == self.seed_id:
                self._runtimes[candidate_id] = InProcessHarness(source, candidate_id)  # shipped with whalekit: trusted
            else:
                # respawn: a candidate that becomes the accepted harness serves every later stage, so a
                # dead worker is replaced (its in-flight episodes end as recorded failures)
                self._runtimes[candidate_id] = IsolatedHarness(source, self.limits, candidate_id, respawn=True)
        return self._runtimes[candidate_id]

    def close(self) -> None:
        for runtime in self._runtimes.values():
            if isinstance(runtime, IsolatedHarness):
                runtime.close()


@dataclass
class RunParts:
    """What every phase of one run is built from."""

    config: RunConfig
    run: RunDir
    domain: Domain
    splits: Splits  # train for weight updates, search for the harness search; test only for the evaluation
    policy: PolicyLike
    budget: RolloutBudget  # the one rollout budget every phase charges
    settings: RolloutSettings  # the run's generation limits and rollout backend, for every rollout
    harnesses: RunHarnesses
    backend: Any = None  # the Ray backend the driver started for this run (its to close), None otherwise

    @classmethod
    def assemble(cls, config: RunConfig, policy: PolicyLike | None = None) -> RunParts:
        """The run's parts: its domain and splits, `policy` (or the model the config names,
        loaded here, on a Ray backend started here when the config asks for one), an empty
        budget, the rollout settings every phase passes on, and h0 with its per-turn limit."""
        domain = get_domain(config.domain, **config.domain_options)
        splits = domain.load_splits(n_train=config.n_train, n_search=config.n_search, n_test=config.n_test,
                                    seed=config.seed, **config.split_options)
        # before the model loads: a bad harness file fails at once
        start = initial_harness_source(domain, config.initial_harness, splits, config.search.limits())
        backend = None
        if policy is None and config.backend.kind == "ray":
            backend = make_backend(config.backend, model=config.model, sampler_kind=config.sampler,
                                   sampler_options=config.vllm_options if config.sampler != "hf" else {})
            policy = backend.policy()
        if policy is None:
            policy = models.load_policy(config.model, sampler=config.sampler, vllm_options=config.vllm_options) \
                if config.sampler != "hf" else models.load_policy(config.model)
        settings = RolloutSettings(config.max_new_tokens_cap, config.max_response_tokens,
                                   backend or backend_of(policy.sampler))
        h0_source = per_turn_limit(start, config.max_response_tokens)
        run = RunDir(config.run_dir)
        harnesses = RunHarnesses(h0_source, run.root / "archive", config.search.limits())
        return cls(config, run, domain, splits, policy, RolloutBudget(config.budget.rollout_total), settings,
                   harnesses, backend)
