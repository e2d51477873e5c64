"""The WHALE driver: alternate RSFT stages and harness-search stages under one rollout
budget, evaluate on the test split at every stage boundary, and keep a run directory that
a killed run resumes from.

    config = resolve_config("smoke", domain="toy", method="whale", schedule="0.6,6")
    run = run_method(config)          # -> RunDir; run.events("test_eval")

Test tasks only ever go to `evaluate_test`, which charges nothing and writes nowhere a
proposer, trainer or schedule reads (enforced by construction: those components are given
`splits.train` / `splits.search` and the archive, never `splits.test`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from whalekit.backends import BackendConfig
from whalekit.budget import BudgetConfig, RolloutBudget
from whalekit.domains.base import Domain, get_domain
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.episode import harness_id
from whalekit.initial_eval import InitialEvalStore, initial_eval_key
from whalekit.presets import flatten, load_preset, missing_data_files
from whalekit.proposers.registry import make_proposer
from whalekit.rsft import RSFTConfig
from whalekit.run_state import RunState
from whalekit.runs import RunDir
from whalekit.schedules import AdaptiveConfig, Schedule, Stage, StageRecord, parse_schedule, should_switch, window_means
from whalekit.search import SearchConfig
from whalekit.timing import PhaseClock, phase, recording, timed_log
from whalekit.tracking import TrackingConfig
from whalekit.types import Task, Trajectory

METHODS_ALL = ("whale", "weight_only", "harness_only", "stagewise", "stagewise_reverse", "fst", "adaptive")
WEIGHT_METHODS = ("whale", "weight_only", "stagewise", "stagewise_reverse", "fst", "adaptive")
SEARCH_METHODS = ("whale", "harness_only", "stagewise", "stagewise_reverse", "fst", "adaptive")
# budget.mode=weight_steps: methods whose search is capped by budget.search_iterations (the
# others search only between weight stages, as long as weight steps remain).
SEARCH_CAPPED = ("harness_only", "stagewise", "stagewise_reverse")


PRESET_INITIAL_HARNESSES = ("h0", "h0_cpu")  # starting harnesses that do not name a run


@dataclass
class RunConfig:
    domain: str  # chess | math | searchqa | toy
    method: str  # whale | weight_only | harness_only | stagewise | stagewise_reverse | fst | adaptive
    schedule: tuple[float, int] = (0.6, 6)  # (E epochs, I iterations) per cycle
    # the harness every method starts from, a file under the domain's harnesses/: h0 (the
    # authors', also h0_faithful) or h0_cpu (h0 plus declared protocol scaffolding; the cpu preset)
    initial_harness: str = "h0"
    seed: int = 0
    preset: str = "cpu"
    model: str = "smollm2-135m"
    sampler: str = "hf"  # hf | vllm | auto
    # VLLMSampler options (vllm / auto samplers): gpu_memory_fraction (vLLM's share of a GPU it
    # shares with the trainer), max_model_len, kv_cache_gib (CPU), dtype, enforce_eager, ...
    vllm_options: dict[str, Any] = field(default_factory=dict)
    # Mechanics presets only (smoke): no turn samples more new tokens than this, whatever the
    # harness asks (the tiny random model never samples EOS). None: the harness's limits stand.
    max_new_tokens_cap: int | None = None
    # Response tokens per episode, all turns together (the authors' assistant-token budget:
    # 8,192; chess 8,129). A turn asks for at most what its episode has left, and the h0's own
    # per-turn limit (its `max_new_tokens`, 256) is raised to this budget, since theirs has
    # none. None (cpu, smoke): no episode budget, the h0's 256 per turn stands.
    max_response_tokens: int | None = None
    # mode rollouts (one shared rollout budget) | weight_steps (equal RSFT batches, search on top);
    # an int is a rollouts-mode budget of that many rollouts.
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    n_train: int = 32  # weight-training problems
    n_search: int = 16  # harness-search problems
    n_test: int = 32  # test problems
    domain_options: dict[str, Any] = field(default_factory=dict)  # Domain(**options): difficulty mix etc.
    split_options: dict[str, Any] = field(default_factory=dict)  # load_splits(**options): source files etc.
    rsft: RSFTConfig = field(default_factory=RSFTConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    stagewise_split: float = 0.5  # stagewise: budget share of the first phase
    eval_k: int = 8  # test mean@k: k samples per test problem (the initial and the final evaluation)
    # Samples per test problem at the evaluations between (the curves' inner points, labelled
    # mean@<k> wherever shown); None: eval_k. The final evaluation is always mean@eval_k.
    eval_k_intermediate: int | None = None
    # The initial evaluation (θ0, starting harness) is the same computation for every method of
    # a (domain, seed): made once and shared through runs_root/.shared/ (whalekit.initial_eval).
    share_initial_eval: bool = True
    eval_temperature: float = 1.0  # test sampling: T 1 / top_p 1 / top_k 20, as the authors evaluated
    eval_top_p: float = 1.0
    eval_top_k: int = 20  # 0 disables top-k
    proposer: str = "reflective"  # reflective | anthropic | openai
    proposer_options: dict[str, Any] = field(default_factory=dict)
    runs_root: str = "runs"
    # sandbox: proposed harnesses and model-written Python run behind whalekit.sandbox (bubblewrap).
    # none: trusted code only, for debugging; runs unsandboxed with a loud warning, recorded here.
    isolation: str = "sandbox"
    # where rollouts run: local (this process) or ray (rollout-worker actors); same events either way
    backend: BackendConfig = field(default_factory=BackendConfig)
    # experiment tracking: TensorBoard / W&B offline / MLflow file store under the run, each off by default
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        self.schedule = parse_schedule(self.schedule)
        if self.isolation not in ("sandbox", "none"):
            raise ValueError(f"isolation must be 'sandbox' or 'none', got {self.isolation!r}")
        if self.method not in WEIGHT_METHODS + SEARCH_METHODS:
            raise ValueError(f"unknown method {self.method!r}")
        if isinstance(self.budget, int):
            self.budget = BudgetConfig(rollouts=self.budget)
        elif isinstance(self.budget, dict):
            self.budget = BudgetConfig(**self.budget)
        if self.max_response_tokens is not None and self.max_response_tokens <= 0:
            raise ValueError(f"max_response_tokens must be positive or None, got {self.max_response_tokens}")
        if min(self.n_test, self.eval_k) <= 0 or min(self.eval_top_k, self.eval_temperature) < 0:
            raise ValueError("n_test and eval_k must be positive, eval_top_k and eval_temperature >= 0")
        if self.eval_k_intermediate is not None and not 0 < self.eval_k_intermediate <= self.eval_k:
            raise ValueError(f"eval_k_intermediate must be between 1 and eval_k ({self.eval_k}) or None, "
                             f"got {self.eval_k_intermediate}")
        if self.budget.mode == "weight_steps" and self.method in SEARCH_CAPPED and self.budget.search_iterations <= 0:
            raise ValueError(f"{self.method} in budget.mode=weight_steps needs budget.search_iterations > 0")
        if self.method in WEIGHT_METHODS and self.n_train <= 0:
            raise ValueError(f"{self.method} trains weights: n_train must be positive")
        if self.method in SEARCH_METHODS and self.n_search <= 0:
            raise ValueError(f"{self.method} searches harnesses: n_search must be positive")
        for name, cls in (("rsft", RSFTConfig), ("search", SearchConfig), ("adaptive", AdaptiveConfig),
                          ("backend", BackendConfig), ("tracking", TrackingConfig)):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, cls(**value))
        if self.rsft.seed != self.seed:
            self.rsft = dataclasses.replace(self.rsft, seed=self.seed)

    @property
    def run_name(self) -> str:
        """`<method>[-E,I]-s<seed>`, plus `-<initial harness>` when a run starts from
        a harness other than a preset's own starting points (h0, h0_cpu): the
        zero-start runs from h0_faithful sit beside the preset's runs, never over them."""
        suffix = "" if self.initial_harness in PRESET_INITIAL_HARNESSES else f"-{self.initial_harness}"
        if self.method in ("weight_only", "harness_only", "adaptive"):
            return f"{self.method}-s{self.seed}{suffix}"
        epochs, iterations = self.schedule
        return f"{self.method}-{epochs:g},{iterations}-s{self.seed}{suffix}"

    @property
    def run_dir(self) -> Path:
        # a preset file (path/to/mine.yaml) files its runs under its name (mine), as a named preset does
        return Path(self.runs_root) / Path(self.preset).stem / self.domain / self.run_name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def resolve_config(preset: str = "cpu", domain: str = "chess", method: str = "whale",
                   schedule: str | tuple[float, int] | None = None, seed: int = 0, **overrides: Any) -> RunConfig:
    """Preset file values, then the domain's section, then explicit overrides."""
    data = load_preset(preset)
    domains = data.pop("domains", {})
    for key in ("grid", "notes", "reproduce"):  # read by the CLI's grid and by whalekit.reproduce, not a run's
        data.pop(key, None)
    if domain not in domains:
        raise ValueError(f"preset {preset!r} has no section for domain {domain!r}; it has {sorted(domains)}")
    layers = [data, dict(domains[domain]), dict(overrides)]
    for layer in layers:  # `budget: 512` is shorthand for `budget: {rollouts: 512}`
        if isinstance(layer.get("budget"), int):
            layer["budget"] = {"rollouts": layer["budget"]}
    merged = _deep_merge(_deep_merge(layers[0], layers[1]), layers[2])
    if schedule is not None:
        merged["schedule"] = schedule
    missing = missing_data_files(merged.get("split_options", {}))
    if missing:
        raise FileNotFoundError(f"preset {preset!r}, domain {domain!r}: missing data files (set WHALEKIT_DATA or "
                                f"override split_options):\n  " + "\n  ".join(missing))
    return RunConfig(domain=domain, method=method, seed=seed, preset=preset, **merged)


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def per_turn_limit(h0_source: str, max_response_tokens: int | None) -> str:
    """The h0 with its per-turn `max_new_tokens` class attribute raised to the episode's
    response budget (theirs caps only the episode); unchanged without a budget, or for an
    h0 that sets no such attribute."""
    if max_response_tokens is None:
        return h0_source
    line = f"    max_new_tokens = {max_response_tokens}  # per turn: what the episode's response budget has left"
    return re.sub(r"^    max_new_tokens = \d+.*$", line, h0_source, count=1, flags=re.MULTILINE)


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


def evaluate_test(domain: Domain, harness: Any, sampler: Any, tasks: list[Task], k: int, temperature: float,
                  seed: int, index: int, top_p: float = 1.0, top_k: int = 20) -> list[Trajectory]:
    """k rollouts per test task with the current weights and accepted harness; never charged."""
    episodes = [Episode(task, harness, i) for task in tasks for i in range(k)]
    return rollout(domain, episodes, sampler, RolloutConfig(temperature=temperature, top_p=top_p, top_k=top_k,
                                                            seed=seed + 7_777_777, step=index,
                                                            description=f"test eval {index}"))


class _Driver:
    """One run's moving parts; `run_method` is the public entry point."""

    def __init__(self, config: RunConfig, policy: Any = None):
        from whalekit.archive import Archive

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
            from whalekit.backends import make_backend

            self.backend = make_backend(config.backend, model=config.model, sampler_kind=config.sampler,
                                        sampler_options=config.vllm_options if config.sampler != "hf" else {})
            policy = self.backend.policy()
        if policy is None:
            from whalekit.models import load_policy

            policy = load_policy(config.model, sampler=config.sampler, vllm_options=config.vllm_options) \
                if config.sampler != "hf" else load_policy(config.model)
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
        self.archive: Any = None  # the archive of the current harness phase (opened by `open_archive`)
        if config.search.archive_scope == "run":
            self.archive = Archive.open(self.archive_root, self.domain.name)
            self.archive.ensure_seed(self.h0_source)
        self.trainer = None
        if config.method in WEIGHT_METHODS:
            from whalekit.rsft import RSFTTrainer

            self.trainer = RSFTTrainer(policy, self.domain, self.splits.train, config.rsft, self.budget)
        epochs, iterations = config.schedule
        self.schedule = Schedule(config.method, epochs, iterations, config.stagewise_split, config.adaptive,
                                 config.search.count_incoming)
        self._runtimes: dict[str, Any] = {}
        self._resumed_at: tuple[int, float] = (0, time.monotonic())  # (work done, when) as this process began
        from whalekit.tracking import attach

        self.tracker = attach(self.run, config.tracking)  # sends every committed event to the enabled sinks

    def open_archive(self, state: RunState) -> Any:
        """The archive this harness stage searches. `run` scope: the run's one archive.
        `round` scope: a fresh archive per harness phase (a phase starts after every weight
        stage; harness_only has one), seeded with the incoming harness."""
        from whalekit.archive import Archive, round_folder

        if self.config.search.archive_scope == "run":
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
        from whalekit.archive import archive_folders

        for folder in archive_folders(self.archive_root):
            path = folder / "candidates" / candidate_id / "harness.py"
            if path.exists():
                return path.read_text(encoding="utf-8")
        raise KeyError(f"no harness {candidate_id!r} in {self.archive_root}")

    def _make_proposer(self, step: int = 0) -> Any:
        return make_proposer(self.config.proposer, self.domain, self.archive, self.config.seed * 100_003 + step,
                             self.config.proposer_options, prompt_only=self.config.method == "fst",
                             initial_source=self.h0_source)

    # -- harness runtimes -----------------------------------------------------------------
    def runtime(self, candidate_id: str) -> Any:
        if candidate_id not in self._runtimes:
            source = self.source(candidate_id)
            if candidate_id == self.seed_id:
                self._runtimes[candidate_id] = InProcessHarness(source, candidate_id)  # shipped with whalekit: trusted
            else:
                from whalekit.isolation import IsolatedHarness

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

    # -- state ----------------------------------------------------------------------------
    def budget_total(self) -> int | None:
        """The rollout budget (None in weight_steps mode, where rollouts are counted, not capped)."""
        return self.budget.total if self.config.budget.mode == "rollouts" else None

    def budget_left(self, state: RunState) -> bool:
        """rollouts mode: rollouts remain. weight_steps mode: RSFT batches remain (harness_only:
        proposer iterations), so a run ends after its last weight stage, as the authors' did."""
        if self.config.budget.mode == "rollouts":
            return self.budget.remaining > 0
        return self.weight_steps_left() or self.search_iterations_left(state)

    def weight_steps_left(self) -> bool:
        """weight_steps mode: RSFT batches remain (always true in rollouts mode)."""
        if self.config.budget.mode == "rollouts":
            return True
        return self.trainer is not None and self.trainer.state.batches < self.config.budget.weight_steps

    def search_iterations_left(self, state: RunState) -> bool:
        """weight_steps mode: proposer iterations remain for a method whose search is capped."""
        if self.config.budget.mode == "rollouts":
            return True
        return self.config.method in SEARCH_CAPPED and \
            state.search_iterations < self.config.budget.search_iterations

    def next_stage(self, state: RunState) -> Stage:
        history = [StageRecord(**h) for h in state.history]
        if self.config.budget.mode == "weight_steps" and self.config.method in ("stagewise", "stagewise_reverse"):
            # Equal weight steps: the whole weight budget in one phase, the search's in the other.
            weight = Stage("weight", epochs=self.schedule.epochs)
            harness = Stage("harness", iterations=self.schedule.proposer_iterations)
            first, second = (weight, harness) if self.config.method == "stagewise" else (harness, weight)
            first_left = self.weight_steps_left() if first.kind == "weight" else self.search_iterations_left(state)
            return first if first_left else second
        return self.schedule.next_stage(history, self.budget.total)

    def archive_rollouts(self) -> int:
        """Search rollouts recorded in every archive of the run (all rounds): candidate
        evaluations and an LLM proposer's prototype runs alike, both charged to the budget."""
        from whalekit.archive import Archive, archive_folders
        from whalekit.proposers.prototype import prototype_rollouts

        archives = [Archive.open(folder, self.domain.name) for folder in archive_folders(self.archive_root)]
        evaluated = sum(int(score["n"]) for a in archives for e in a.entries() for score in e.scores.values())
        return evaluated + prototype_rollouts(self.archive_root)

    def restore_budget(self, search_rollouts: int) -> None:
        """Rollouts spent: what the loaded trainer checkpoint sampled plus `search_rollouts`
        (evaluations and prototype runs). A resumed run restores the committed count, so it
        starts its next stage exactly where the uninterrupted run did; a harness step then
        charges, as it begins, the evaluations a killed attempt at that very step had already
        recorded in the archive (the search stage does not redo them), so neither run spends
        more than the other."""
        from whalekit.proposers.prototype import BUDGET_PHASE, prototype_rollouts

        spent_rsft = self.trainer.state.sampled if self.trainer else 0
        self.budget.spent = spent_rsft + search_rollouts
        prototyped = min(search_rollouts, prototype_rollouts(self.archive_root))
        self.budget.by_phase = {"rsft": spent_rsft, "search": search_rollouts - prototyped}
        if prototyped:
            self.budget.by_phase[BUDGET_PHASE] = prototyped

    def commit(self, state: RunState) -> None:
        self.run.commit(state.to_json())
        keep = state.checkpoint
        folder = self.run.root / "checkpoints"
        if folder.exists():
            for old in folder.iterdir():
                if str(old) != keep:
                    shutil.rmtree(old, ignore_errors=True)

    def work_done(self, state: RunState) -> tuple[int, int, str]:
        """(done, total, unit) of the run's work: rollouts against the budget, or in
        weight_steps mode (rollouts uncapped) weight steps, or harness_only's search iterations."""
        if self.config.budget.mode == "rollouts":
            return self.budget.spent, self.budget.total, "rollouts"
        if self.trainer is not None:
            return self.trainer.state.batches, self.config.budget.weight_steps, "weight steps"
        return state.search_iterations, self.config.budget.search_iterations, "search iterations"

    def report_stage(self, state: RunState, kind: str) -> None:
        """One line for the stage just finished: kind, work done / total, its signal (the
        training reward window, as rsft_batch logs it, or the best search score), elapsed
        and ETA at the rate measured since this process began (or resumed) the run."""
        from whalekit.progress import report, stage_line

        signal: float | None = None
        if kind == "harness" and state.stage_signals:
            signal = state.stage_signals[-1]
        elif kind == "weight" and self.trainer is not None and self.trainer.state.rewards:
            window = self.trainer.state.rewards[-self.config.rsft.reward_window:]
            signal = sum(window) / len(window)
        done, total, unit = self.work_done(state)
        done_at_start, started = self._resumed_at
        report(stage_line(kind, len(state.history) - 1, done, total, signal, time.monotonic() - started,
                          done_at_start, unit=unit))

    # -- steps ----------------------------------------------------------------------------
    def eval_samples(self, reason: str) -> int:
        """Samples per test problem: eval_k for the initial and the final evaluation (the
        table's numbers), eval_k_intermediate (when set) for those between."""
        if reason in ("initial", "final") or self.config.eval_k_intermediate is None:
            return self.config.eval_k
        return self.config.eval_k_intermediate

    def initial_eval_store(self) -> InitialEvalStore | None:
        """Where this run's initial evaluation is shared with the other methods of its
        (domain, seed), or None when it is not shared (see whalekit.initial_eval)."""
        if not self.shares_initial_eval:
            return None
        from whalekit.provenance import cpu_kind, resolved_sampler, source_sha256

        c = self.config
        self._initial_inputs = {
            "domain": c.domain, "domain_options": c.domain_options, "split_options": c.split_options,
            "n_test": c.n_test, "seed": c.seed, "harness_id": self.seed_id, "model": c.model,
            "sampler": resolved_sampler(c.sampler, self.sampler), "vllm_options": c.vllm_options, "k": c.eval_k,
            "temperature": c.eval_temperature, "top_p": c.eval_top_p, "top_k": c.eval_top_k,
            "max_new_tokens_cap": c.max_new_tokens_cap, "max_response_tokens": c.max_response_tokens,
            "source_sha256": source_sha256(), "cpu_kind": cpu_kind()}
        return InitialEvalStore(Path(c.runs_root), initial_eval_key(self._initial_inputs))

    def evaluate(self, state: RunState, reason: str) -> None:
        started = time.perf_counter()
        index, k = state.evaluations, self.eval_samples(reason)
        store = self.initial_eval_store() if index == 0 else None
        if store is not None and store.load() is not None:
            metrics = store.copy_to(self.run.root / "test" / f"eval-{index:03d}.jsonl")
        else:
            with phase("test_eval"):
                trajectories = evaluate_test(self.domain, self.runtime(state.accepted_id), self.sampler,
                                             self.splits.test, k, self.config.eval_temperature,
                                             self.config.seed, index, self.config.eval_top_p,
                                             self.config.eval_top_k)
            path = self.run.write_trajectories(f"eval-{index:03d}", trajectories)
            metrics = mean_at_k(trajectories, self.domain)
            if store is not None:
                store.save(path, metrics, self._initial_inputs)
        self.run.log("test_eval", index=index, reason=reason, rollouts=self.budget.spent,
                     weights_version=self.sampler.version, accepted_id=state.accepted_id, k=k,
                     n_tasks=len(self.splits.test), stages_done=len(state.history),
                     wall_s=time.perf_counter() - started, **metrics)
        state.evaluations = index + 1

    def weight_step(self, state: RunState, stage: Stage) -> bool:
        assert self.trainer is not None
        goal = round(stage.epochs * len(self.splits.train)) if not stage.adaptive else None
        left = self.config.rsft.batch_problems if goal is None else goal - state.stage_problems
        n = min(left, self.config.rsft.batch_problems, self.budget.remaining // self.config.rsft.samples_per_problem)
        if n <= 0 or not self.weight_steps_left():
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
        from whalekit.search import run_search_stage, stage_outcome

        if self.budget.remaining < len(self.splits.search):
            return False
        if self.config.budget.mode == "weight_steps" and self.config.method in SEARCH_CAPPED \
                and not self.search_iterations_left(state):
            return False
        before = state.search_rollouts  # as committed before this step began
        self.open_archive(state)
        self.restore_budget(self.archive_rollouts())
        one = dataclasses.replace(self.config.search, iterations=1)
        # A proposer per iteration, seeded by the step: a resumed run proposes what an
        # uninterrupted one would have.
        proposer = self._make_proposer(state.step)
        accepted = run_search_stage(self.domain, self.archive, proposer, self.sampler, self.splits.search,
                                    self.budget, one, weights_version=self.sampler.version, seed=self.config.seed,
                                    step=state.step)
        # The archive is the durable record of what search sampled, including evaluations a
        # killed attempt at this very step had already written.
        state.search_rollouts = self.archive_rollouts()
        self.restore_budget(state.search_rollouts)
        outcome = stage_outcome(self.archive, state.step, self.sampler.version)
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
        board = self.archive.leaderboard(self.sampler.version)
        best = board[0][1] if board else 0.0
        state.stage_signals.append(best)
        self.run.log("search_iteration", phase_step=state.step, rollouts=self.budget.spent,
                     weights_version=self.sampler.version, accepted_id=accepted, best_score=best,
                     accepted_score=self.archive.entry(accepted).score(self.sampler.version),
                     archive_size=len(self.archive), candidates_evaluated=outcome.get("candidates_evaluated", 0),
                     empty=empty, early_stop=state.stage_stop == "early_stop")
        return True

    def stage_finished(self, state: RunState, stage: Stage) -> bool:
        if state.stage_stop:  # the search accepted a candidate at the early-stop success rate
            return True
        if stage.adaptive:
            cfg = self.config.adaptive
            if stage.kind == "harness":
                return should_switch(state.stage_signals, cfg.min_search_iterations, cfg.search_patience,
                                     cfg.max_search_iterations)
            # Weight stages: the per-batch training reward, averaged over a sliding window
            # of this stage's batches (the authors' phase-local window).
            batches = lambda epochs: cfg.weight_batches(epochs, len(self.splits.train),  # noqa: E731
                                                        self.config.rsft.batch_problems)
            signals = window_means(state.stage_signals, batches(cfg.weight_window_epochs))
            return should_switch(signals, batches(cfg.min_weight_epochs), batches(cfg.weight_patience_epochs),
                                 batches(cfg.max_weight_epochs))
        if stage.kind == "weight":
            return state.stage_problems >= round(stage.epochs * len(self.splits.train))
        return state.stage_steps >= stage.iterations

    def end_stage(self, state: RunState, stage: Stage, budget_exhausted: bool = False) -> None:
        """Close the running stage: history, stall count, `stage_end`, and a test evaluation
        when it changed something (a step that was not an empty search iteration)."""
        rollouts = self.budget.spent - state.stage_rollouts_start
        state.history.append({"kind": stage.kind, "rollouts": rollouts, "steps": state.stage_steps})
        productive = state.stage_steps - state.stage_empty_steps
        state.stalled = 0 if productive else state.stalled + 1
        extra: dict[str, Any] = {}
        if stage.kind == "harness":  # a phase whose every iteration was empty says so
            extra = {"empty_steps": state.stage_empty_steps,
                     "empty": bool(state.stage_steps) and not productive}
            if state.stage_stop:
                extra["stopped"] = state.stage_stop
        if budget_exhausted:
            extra["budget_exhausted"] = True
        self.run.log("stage_end", kind=stage.kind, stage=len(state.history) - 1, rollouts=self.budget.spent,
                     steps=state.stage_steps, stage_rollouts=rollouts, **extra)
        self.report_stage(state, stage.kind)
        # The run's last stage is left to the final evaluation (at eval_k) when the ones between
        # take fewer samples.
        last = state.stalled >= 2 or not self.budget_left(state)
        if not (last and self.eval_samples("between") < self.config.eval_k) \
                and (productive or (state.stage_steps and self.changed_since_evaluation(state))):
            self.evaluate(state, f"after {stage.kind} stage")
        state.stage = None

    def changed_since_evaluation(self, state: RunState) -> bool:
        """The weights or the accepted harness differ from those of the last test evaluation."""
        last = self.run.events("test_eval")[-1]
        return (last["weights_version"], last["accepted_id"]) != (self.sampler.version, state.accepted_id)

    # -- the loop -------------------------------------------------------------------------
    def execute(self) -> RunDir:
        with recording(self.clock):  # components mark their phases on this clock
            return self._execute()

    def _execute(self) -> RunDir:
        committed = self.run.state()
        state = RunState.from_json(committed) if committed else RunState.fresh(self.seed_id)
        if state.finished:
            return self.run
        if committed:
            self.run.roll_back_uncommitted_events()
            if self.trainer is not None and state.checkpoint:
                self.trainer.load_checkpoint(Path(state.checkpoint))
            self.restore_budget(state.search_rollouts)
        else:
            self.run.events_path.unlink(missing_ok=True)  # a start killed before its first commit
            from whalekit.provenance import provenance

            self.run.write_config({**self.config.to_json(),
                                   "provenance": provenance(self.config.sampler, self.sampler)})
            self.run.log("run_start", rollouts=0, budget=self.budget_total(), budget_mode=self.config.budget.mode,
                         weight_steps=self.config.budget.weight_steps, method=self.config.method,
                         schedule=list(self.config.schedule), domain=self.config.domain, seed=self.config.seed,
                         n_train=len(self.splits.train), n_search=len(self.splits.search), n_test=len(self.splits.test))
            self.evaluate(state, "initial")
            self.commit(state)
        self._resumed_at = (self.work_done(state)[0], time.monotonic())  # the stage lines' rate starts here
        try:
            while state.stalled < 2 and self.budget_left(state):
                if state.stage is None:
                    history = state.history
                    stage = self.next_stage(state)
                    state.begin_stage(asdict(stage), self.budget.spent)
                    self.run.log("stage_start", kind=stage.kind, stage=len(history), rollouts=self.budget.spent,
                                 epochs=stage.epochs, iterations=stage.iterations, adaptive=stage.adaptive)
                assert state.stage is not None
                stage = Stage(**state.stage)
                progressed = self.weight_step(state, stage) if stage.kind == "weight" else self.harness_step(state)
                if progressed:
                    state.stage_steps += 1
                    state.step += 1
                if not progressed or self.stage_finished(state, stage):
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
            self.run.log("run_end", rollouts=self.budget.spent, budget=self.budget_total(),
                         best_mean_at_k=best["mean_at_k"], best_at_rollouts=best["rollouts"],
                         final_mean_at_k=evals[-1]["mean_at_k"], accepted_id=state.accepted_id,
                         by_phase=self.budget.by_phase, wall_s=time.time() - state.started)
            state.finished = True
            self.commit(state)
        finally:
            self.close()
        return self.run


class StaleRunError(ValueError):
    """A run directory holds a run made with another configuration."""


def config_changes(config: RunConfig, folder: Path | None = None) -> list[str]:
    """How `config` differs from the configuration recorded in its run directory (or in
    `folder`, e.g. a committed record; empty when they agree or nothing is recorded yet). A
    finished run is only reused for the configuration that made it: a changed preset must
    not pass off old numbers as new."""
    run = RunDir(folder if folder is not None else config.run_dir)
    if not run.config_path.exists():
        return []
    # Fields added to whalekit after the run was made count at their defaults.
    recorded = flatten(_deep_merge(_json(_field_defaults(RunConfig)), run.config()))
    current = flatten(_json(config.to_json()))
    return [f"{key}: {recorded.get(key)!r} -> {current.get(key)!r}" for key in sorted(set(recorded) | set(current))
            if key != "runs_root" and not key.startswith(("provenance.", "backend.", "tracking."))
            and recorded.get(key) != current.get(key)]


def _field_defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
            out[f.name] = asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
    return out


def _json(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data, sort_keys=True, default=str))


def check_not_stale(config: RunConfig) -> None:
    changes = config_changes(config)
    if changes:
        raise StaleRunError(f"{config.run_dir}: made with a different configuration ({'; '.join(changes)}); "
                            f"delete the folder to recompute it, or set another runs_root")


def run_method(config: RunConfig, policy: Any = None, reuse_foreign: bool | None = None) -> RunDir:
    """Run (or resume, or reuse when finished) one (domain, method, schedule, seed) run.
    A run made by other code or another sampler is refused unless `reuse_foreign`
    (or WHALEKIT_REUSE_FOREIGN_RUNS=1), see whalekit.provenance."""
    check_not_stale(config)
    from whalekit.provenance import check_reuse, provenance

    if RunDir(config.run_dir).config_path.exists():  # provenance hashes the package and asks git: only to compare
        check_reuse(config.run_dir, provenance(config.sampler, policy.sampler if policy is not None else None),
                    reuse_foreign)
    from whalekit.sandbox import isolation_mode, set_isolation_mode

    if config.isolation != isolation_mode():
        set_isolation_mode(config.isolation)  # "none" warns loudly; the value is in the run's config.json
    run = RunDir(config.run_dir)
    if run.done:
        from whalekit.tracking import export_run

        export_run(run.root, config.tracking)  # a reused run still reaches sinks switched on since
        return run
    return _Driver(config, policy).execute()
