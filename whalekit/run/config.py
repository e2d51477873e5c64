"""A run's configuration: the `RunConfig` dataclass, `resolve_config` (a preset file, its
domain's section, then overrides) and the check that a run directory was made with the
configuration asked of it.

    config = resolve_config("smoke", domain="toy", method="whale", schedule="0.6,6")
    check_not_stale(config)           # StaleRunError when config.run_dir holds another configuration's run
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from whalekit.infra.runs import RunDir
from whalekit.infra.tracking import TrackingConfig
from whalekit.presets import flatten, load_preset, missing_data_files
from whalekit.rollouts.backends import BackendConfig
from whalekit.rollouts.budget import BudgetConfig
from whalekit.run.methods import METHOD_NAMES as METHODS_ALL
from whalekit.run.methods import SEARCH_CAPPED, SEARCH_METHODS, WEIGHT_METHODS, method
from whalekit.run.schedules import AdaptiveConfig, parse_schedule
from whalekit.samplers.base import SamplingParams
from whalekit.search.stage import SearchConfig
from whalekit.weights.rsft_config import RSFTConfig

__all__ = ["METHODS_ALL", "PRESET_INITIAL_HARNESSES", "SEARCH_CAPPED", "SEARCH_METHODS", "WEIGHT_METHODS",
           "RunConfig", "StaleRunError", "check_not_stale", "config_changes", "resolve_config"]


PRESET_INITIAL_HARNESSES = ("h0", "h0_cpu")  # starting harnesses that do not name a run


EVAL_BETWEEN = ("productive_stages", "changed_agent", "none")  # RunConfig.eval_between


@dataclass
class RunConfig:
    domain: str  # chess | math | searchqa | toy
    method: str  # a row of whalekit.run.methods: whale | weight_only | harness_only | stagewise | ... | adaptive
    schedule: tuple[float, int] = (0.6, 6)  # (E epochs, I iterations) per cycle
    # the harness every method starts from, a file under the domain's harnesses/: h0 (the
    # authors', also h0_faithful) or h0_cpu (h0 plus declared protocol scaffolding; the cpu preset);
    # or the path of your own .py file (validated as a candidate; its sha256 in config.json)
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
    # Which stages a test evaluation follows (the curves' inner points and report.stage_effects'
    # decomposition; a stage without one changed nothing, its effect is 0):
    #   "productive_stages": every stage with a step that produced something, even a search stage
    #     that accepted nothing (the records' behaviour);
    #   "changed_agent": only a stage after which the weights or the accepted harness differ from
    #     the last evaluation's (an unchanged agent is not evaluated again; the same decomposition);
    #   "none": only the initial and the final evaluation (no per-stage decomposition).
    eval_between: str = "productive_stages"
    # The initial evaluation (θ0, starting harness) is the same computation for every method of
    # a (domain, seed): made once and shared through runs_root/.shared/ (whalekit.run.initial_eval).
    share_initial_eval: bool = True
    # A committed folder of initial evaluations every run of a pre-registered set reads (cpu-v3:
    # results/cpu-v3/initial-eval): keyed by what the evaluation asks for, not by the code or CPU
    # kind that made it, so every method, tier, session and machine of the set starts from one
    # number per (domain, seed). None: runs_root/.shared, keyed by the code and CPU kind too.
    initial_eval_store: str | None = None
    # Keep every weight stage's last checkpoint (a LoRA adapter is a few MB) under
    # <run>/stage-weights/stage-NN/: what the θ×h compatibility matrix scores
    # (whalekit.repro.compatibility). Off: only the latest checkpoint is kept, for resuming.
    keep_stage_weights: bool = False
    # test sampling: T 1 / top_p 1 / top_k 20, as the authors evaluated
    eval_sampling: SamplingParams = field(default_factory=SamplingParams)
    proposer: str = "reflective"  # reflective | anthropic | openai
    proposer_options: dict[str, Any] = field(default_factory=dict)
    runs_root: str = "runs"
    # sandbox: proposed harnesses and model-written Python run behind whalekit.sandbox.bwrap (bubblewrap).
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
        row = method(self.method)  # an unknown method is a ValueError naming the known ones
        if isinstance(self.budget, int):
            self.budget = BudgetConfig(rollouts=self.budget)
        elif isinstance(self.budget, dict):
            self.budget = BudgetConfig(**self.budget)
        if self.max_response_tokens is not None and self.max_response_tokens <= 0:
            raise ValueError(f"max_response_tokens must be positive or None, got {self.max_response_tokens}")
        self.eval_sampling = SamplingParams.of(self.eval_sampling)
        if min(self.n_test, self.eval_k) <= 0:
            raise ValueError("n_test and eval_k must be positive")
        if self.eval_k_intermediate is not None and not 0 < self.eval_k_intermediate <= self.eval_k:
            raise ValueError(f"eval_k_intermediate must be between 1 and eval_k ({self.eval_k}) or None, "
                             f"got {self.eval_k_intermediate}")
        if self.eval_between not in EVAL_BETWEEN:
            raise ValueError(f"eval_between {self.eval_between!r}: use one of {', '.join(EVAL_BETWEEN)}")
        if self.budget.mode == "weight_steps" and row.search_capped and self.budget.search_iterations <= 0:
            raise ValueError(f"{self.method} in budget.mode=weight_steps needs budget.search_iterations > 0")
        if row.trains_weights and self.n_train <= 0:
            raise ValueError(f"{self.method} trains weights: n_train must be positive")
        if row.searches and self.n_search <= 0:
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
        start = Path(self.initial_harness).stem if self.initial_harness.endswith(".py") else self.initial_harness
        suffix = "" if self.initial_harness in PRESET_INITIAL_HARNESSES else f"-{start}"
        if not method(self.method).schedule_in_name:
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
                   schedule: str | tuple[float, int] | None = None, seed: int = 0, check_data: bool = True,
                   **overrides: Any) -> RunConfig:
    """Preset file values, then the domain's section, then explicit overrides. `check_data`
    False: a missing data file is no error (whalekit.report.cost_model sizes runs without the data)."""
    data = load_preset(preset)
    domains = data.pop("domains", {})
    for key in ("grid", "notes", "reproduce"):  # read by the CLI's grid and by whalekit.reproduce_plan, not a run's
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
    missing = missing_data_files(merged.get("split_options", {})) if check_data else []
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

