"""What a paper-scale run costs, computed from the preset files: the rollouts of every phase
(the driver's own stage and budget rules, stepped with counting phases), then tokens and
GPU-hours under the assumptions in `Assumptions`, each with its source. `docs/scaling.md`'s
cost table is this module's output; `tests/test_cost_model.py` rebuilds it from the presets.

    python -m whalekit.report.cost_model                          # print the table
    python -m whalekit.report.cost_model --write docs/scaling.md  # replace the table in the doc

Counted exactly from the configuration: weight steps, RSFT rollouts (a weight stage's last
batch may be short), search rollouts when every proposed candidate is valid (an invalid one
costs nothing, an early stop ends a stage sooner, an LLM proposer's prototype runs cost more:
none is modelled) and test rollouts (the initial evaluation, one after every stage, as
`whale._Driver.end_stage` does). The adaptive method's stage lengths follow its rewards and are
not modelled.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from whalekit.presets import load_preset
from whalekit.rollouts.budget import RSFT_PHASE, SEARCH_PHASE, RolloutBudget
from whalekit.run.budget_accounting import BudgetAccounting
from whalekit.run.config import RunConfig, resolve_config
from whalekit.run.methods import METHOD_ORDER, method
from whalekit.run.phases.base import StepRecord
from whalekit.run.schedules import Schedule, Stage
from whalekit.run.stage_scheduling import StageScheduler
from whalekit.run.state import RunState

BEGIN, END = "<!-- cost-model:begin -->", "<!-- cost-model:end -->"  # the doc's generated span

# Test files the paper preset names, by their last two path parts: how many problems each holds
# (a preset takes up to n_test from each). Search QA: the Search-R1 / FlashRAG test sets
# (NQ and TriviaQA test, PopQA test, HotpotQA, 2Wiki and MuSiQue dev, Bamboogle test); math:
# AIME 2024 and 2025, 30 problems each (tests/test_paper_aime.py reads the real files).
TEST_FILE_SIZES = {
    "test/nq.jsonl": 3610, "test/triviaqa.jsonl": 11313, "test/popqa.jsonl": 14267, "test/hotpotqa.jsonl": 7405,
    "test/2wikimultihopqa.jsonl": 12576, "test/musique.jsonl": 2417, "test/bamboogle.jsonl": 125,
    "aime24/test.jsonl": 30, "aime25/test.jsonl": 30,
}


@dataclass(frozen=True)
class Assumptions:
    """The figures no preset holds. None is measured at paper scale: replace each with a run's
    own (`generated_tokens` in its events, the sampler's tok/s) when one exists."""

    # Generated tokens per rollout, all turns (assumed; the presets only cap them at
    # max_response_tokens). Math: the 2,000 this doc assumed before; search QA: a few short
    # turns between retrievals; chess: a reasoning model thinking over one to three moves.
    generated_tokens: dict[str, int] = field(default_factory=lambda: {"searchqa": 600, "math": 2000, "chess": 1500})
    # Tokens of a trained sequence (prompt, tool results and response; assumed): search QA's
    # retrieved passages stay in its context, math's code results are short, chess's board is.
    sequence_tokens: dict[str, int] = field(default_factory=lambda: {"searchqa": 3000, "math": 2300,
                                                                     "chess": 2000})
    accepted_fraction: float = 0.3  # RSFT rollouts the verifier accepts, so trained (assumed)
    # Generated tok/s of one vLLM replica of a 2B model at large batch on one H200 (assumed, not
    # measured: the one H200 run had no vLLM; docs/scaling.md), scaled by 2B / parameters.
    sampling_tokens_per_s_2b: float = 20_000.0
    peak_flops: float = 989e12  # dense bf16 FLOP/s of an H100 / H200 SXM (NVIDIA's datasheet)
    mfu: float = 0.4  # model FLOPs utilisation of the trainer (assumed)
    flops_per_param_token: float = 6.0  # forward + backward of a dense transformer (Kaplan et al. 2020)


@dataclass(frozen=True)
class RunRollouts:
    """What one run samples, by phase."""

    weight_steps: int
    search_iterations: int
    stages: int
    rsft: int
    search: int
    test: int

    @property
    def charged(self) -> int:
        """The rollouts its budget counts (test evaluation is free)."""
        return self.rsft + self.search


class _CountingWeights:
    """RSFTPhase's step rule, with the batch charged instead of sampled."""

    kind = "weight"

    def __init__(self, config: RunConfig, budget: RolloutBudget):
        self.config, self.budget, self.steps = config, budget, 0

    def step(self, state: RunState, stage: Stage) -> StepRecord | None:
        rsft = self.config.rsft
        n = rsft.stage_batch_problems(self.config.n_train, self.budget.remaining,
                                      None if stage.adaptive else stage.epochs, state.stage_problems)
        if n <= 0:
            return None
        self.budget.charge(n * rsft.samples_per_problem, RSFT_PHASE)
        self.steps += 1
        state.stage_problems += n
        return StepRecord("rsft_batch", {}, signal=0.0, changed=True)

    def resume(self, state: RunState) -> None: ...
    def spent(self, state: RunState) -> dict[str, int]:
        return {RSFT_PHASE: self.budget.by_phase.get(RSFT_PHASE, 0)}
    def steps_done(self, state: RunState) -> int:
        return self.steps
    def stage_signal(self, state: RunState) -> float | None:
        return None
    def committed(self, state: RunState) -> None: ...
    def close(self) -> None: ...


class _CountingSearch:
    """SearchPhase's step with every candidate valid: the incoming harness scored once per
    archive (a fresh one per harness phase in `round` scope), then M candidates an iteration."""

    kind = "harness"

    def __init__(self, config: RunConfig, budget: RolloutBudget):
        self.config, self.budget = config, budget
        self.archive: int | None = None  # which archive the last step searched
        self.scored_version: int | None = None  # `run` scope: the weights its candidates were last scored at

    def step(self, state: RunState, stage: Stage) -> StepRecord | None:
        n, search = self.config.n_search, self.config.search
        if self.budget.remaining < n:
            return None
        weight_stages = sum(1 for h in state.history if h["kind"] == "weight")
        if search.archive_scope == "round":
            rescore = int(self.archive != weight_stages)
            self.archive = weight_stages
        else:  # the accepted harness, the top few and the seed at new weights: an upper bound
            rescore = 1 if self.scored_version is None else \
                (search.rescore_top + 2 if self.scored_version != weight_stages else 0)
            self.scored_version = weight_stages
        spent = self._evaluate(rescore)
        candidates = 0
        if spent == rescore * n and self.budget.can_afford(n):
            candidates = self._evaluate(search.candidates_per_iteration)
        elif not spent:
            return None
        state.stage_empty_steps += int(not candidates)  # only the incoming harness scored: changes nothing
        state.search_rollouts = self.budget.by_phase.get(SEARCH_PHASE, 0)
        state.search_iterations += 1
        return StepRecord("search_iteration", {}, signal=0.0, changed=bool(candidates))

    def _evaluate(self, candidates: int) -> int:
        n = self.config.n_search
        rollouts = min(candidates, self.budget.remaining // n) * n
        self.budget.charge(rollouts, SEARCH_PHASE)
        return rollouts

    def resume(self, state: RunState) -> None: ...
    def spent(self, state: RunState) -> dict[str, int]:
        return {SEARCH_PHASE: state.search_rollouts}
    def steps_done(self, state: RunState) -> int:
        return state.search_iterations
    def stage_signal(self, state: RunState) -> float | None:
        return None
    def committed(self, state: RunState) -> None: ...
    def close(self) -> None: ...


def d_test_size(config: RunConfig) -> int:
    """D_test's size: up to n_test from each test file (sizes from TEST_FILE_SIZES), else n_test."""
    paths = config.split_options.get("test_paths") or []
    if not paths:
        return config.n_test
    sizes = []
    for path in paths:
        key = "/".join(Path(str(path)).parts[-2:])
        if key not in TEST_FILE_SIZES:
            raise KeyError(f"no known size for test file {path}: add it to whalekit.report.cost_model.TEST_FILE_SIZES")
        sizes.append(min(config.n_test, TEST_FILE_SIZES[key]))
    return sum(sizes)


def count_rollouts(config: RunConfig) -> RunRollouts:
    """Step the driver's stage loop (whale._Driver.algorithm_1) with counting phases."""
    row = method(config.method)
    if row.stages == "alternate_adaptive":
        raise ValueError("the adaptive method's stage lengths follow its rewards: not modelled")
    budget = RolloutBudget(config.budget.rollout_total)
    phases: dict[str, Any] = {}
    if row.trains_weights:
        phases["weight"] = _CountingWeights(config, budget)
    if row.searches:
        phases["harness"] = _CountingSearch(config, budget)
    epochs, iterations = config.schedule
    schedule = Schedule(config.method, epochs, config.search.proposer_iterations(iterations), config.stagewise_split,
                        config.adaptive)
    accounting = BudgetAccounting(config, budget, phases)
    stages = StageScheduler(config, schedule, accounting, n_train=config.n_train)
    state = RunState.fresh("h0", now=0.0)
    evaluated: list[bool] = []  # per closed stage: it changed the agent, so a test evaluation follows
    while accounting.goes_on(state):
        if state.stage is None:
            state.begin_stage(asdict(stages.next_stage(state)), budget.spent)
        assert state.stage is not None
        stage = Stage(**state.stage)
        record = phases[stage.kind].step(state, stage) if accounting.may_step(stage.kind, state) else None
        if record is not None:
            state.stage_steps += 1
            state.step += 1
        if record is None or stages.finished(state, stage):
            evaluated.append(state.stage_steps > state.stage_empty_steps)
            state.end_stage(stage.kind, budget.spent)  # as whale._Driver.end_stage
            state.stage = None
    if state.stage is not None:
        evaluated.append(state.stage_steps > state.stage_empty_steps)
        state.end_stage(state.stage["kind"], budget.spent)
    return RunRollouts(weight_steps=phases["weight"].steps if "weight" in phases else 0,
                       search_iterations=state.search_iterations, stages=len(state.history),
                       rsft=budget.by_phase.get(RSFT_PHASE, 0), search=budget.by_phase.get(SEARCH_PHASE, 0),
                       test=d_test_size(config) * evaluation_samples(config, evaluated))


def evaluation_samples(config: RunConfig, evaluated: list[bool]) -> int:
    """Samples per test problem over a run whose stages changed the agent as `evaluated` says
    (whale._Driver.end_stage): the initial evaluation at eval_k, one after each stage that
    changed something at eval_k_intermediate, and the last one at eval_k: the last stage's own
    when the ones between take eval_k too, else a final evaluation after it."""
    k, between = config.eval_k, config.eval_k_intermediate or config.eval_k
    changed = sum(evaluated)
    if between == k:
        return k * (1 + changed)
    return k + between * (changed - int(bool(evaluated) and evaluated[-1])) + (k if changed else 0)


def parameters(model: str) -> float:
    """A model's parameters from its name (Qwen/Qwen3.5-2B -> 2e9): nominal, as the paper names them."""
    match = re.search(r"(\d+(?:\.\d+)?)B\b", model)
    if not match:
        raise ValueError(f"no parameter count in the model name {model!r}")
    return float(match.group(1)) * 1e9


@dataclass(frozen=True)
class RunCost:
    config: RunConfig
    rollouts: RunRollouts
    generated_tokens: float  # all sampled rollouts (training, search, test), at the assumed mean
    max_generated_tokens: float | None  # the same at the episode cap (max_response_tokens), None without one
    sampling_gpu_h: float
    training_gpu_h: float
    wall_h: float  # on the preset's backend: sampling split over its rollout workers, the trainer on one GPU


def run_cost(config: RunConfig, assumptions: Assumptions = Assumptions()) -> RunCost:
    rollouts = count_rollouts(config)
    sampled = rollouts.rsft + rollouts.search + rollouts.test
    params = parameters(config.model)
    tokens = sampled * assumptions.generated_tokens[config.domain]
    cap = None if config.max_response_tokens is None else float(sampled * config.max_response_tokens)
    sampling_h = tokens / (assumptions.sampling_tokens_per_s_2b * 2e9 / params) / 3600
    trained = rollouts.rsft * assumptions.accepted_fraction * assumptions.sequence_tokens[config.domain]
    flops = assumptions.flops_per_param_token * params * trained
    training_h = flops / (assumptions.mfu * assumptions.peak_flops) / 3600
    replicas = config.backend.num_workers if config.backend.kind == "ray" else 1
    return RunCost(config, rollouts, tokens, cap, sampling_h, training_h, sampling_h / replicas + training_h)


def paper_runs(preset: str = "paper") -> list[RunConfig]:
    """Every non-adaptive method at the preset's schedule in every domain, and the preset's
    grid of schedules for WHALE in the grid's domain (seed 0; the seeds cost alike)."""
    data = load_preset(preset)
    methods = [m for m in METHOD_ORDER if method(m).stages != "alternate_adaptive"]
    configs = [resolve_config(preset, domain, m, check_data=False) for domain in data["domains"] for m in methods]
    grid = data.get("grid", {})
    for epochs, iterations in grid.get("schedules", []):
        config = resolve_config(preset, grid["domain"], "whale", schedule=(epochs, iterations), check_data=False)
        if all(c.run_name != config.run_name or c.domain != config.domain for c in configs):
            configs.append(config)
    return configs


def _millions(value: float) -> str:
    return f"{value / 1e6:,.1f}"


def cost_table(preset: str = "paper", assumptions: Assumptions = Assumptions()) -> str:
    """The markdown table docs/scaling.md carries between its cost-model markers."""
    costs = [run_cost(c, assumptions) for c in paper_runs(preset)]
    backend = costs[0].config.backend
    gpus = backend.num_workers * math.ceil(backend.gpus_per_worker) + 1 if backend.kind == "ray" else 1
    a, domains = assumptions, ("searchqa", "math", "chess")
    lines = [f"Generated by `python -m whalekit.report.cost_model --write docs/scaling.md` from the `{preset}` preset "
             f"(seed 0 each; `tests/test_cost_model.py` checks it). Assumptions (`Assumptions`, search QA / math / "
             f"chess): {' / '.join(f'{a.generated_tokens[d]:,}' for d in domains)} generated tokens per rollout, "
             f"{' / '.join(f'{a.sequence_tokens[d]:,}' for d in domains)} trained tokens per accepted rollout, "
             f"{a.accepted_fraction:.0%} accepted, {a.sampling_tokens_per_s_2b:,.0f} generated tok/s per vLLM "
             f"replica of a 2B model, {a.mfu:.0%} of {a.peak_flops / 1e12:,.0f} TFLOP/s in training.", "",
             f"| domain | run | weight steps | RSFT rollouts | search rollouts | test rollouts | generated tokens (M) "
             f"| at the episode cap (M) | sampling GPU-h | training GPU-h | wall h on {gpus} GPUs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for cost in costs:
        r = cost.rollouts
        cap = "—" if cost.max_generated_tokens is None else _millions(cost.max_generated_tokens)
        lines.append(f"| {cost.config.domain} | {cost.config.run_name} | {r.weight_steps} | {r.rsft:,} | "
                     f"{r.search:,} | {r.test:,} | {_millions(cost.generated_tokens)} | {cap} | "
                     f"{cost.sampling_gpu_h:.1f} | {cost.training_gpu_h:.1f} | {cost.wall_h:.1f} |")
    total_gpu_h = sum(c.sampling_gpu_h + c.training_gpu_h for c in costs)
    total_rollouts = sum(c.rollouts.rsft + c.rollouts.search + c.rollouts.test for c in costs)
    lines += ["", f"All {len(costs)} runs: {total_rollouts:,} "
                  f"rollouts, {total_gpu_h:,.0f} GPU-h, {sum(c.wall_h for c in costs):,.0f} h of wall time on "
                  f"{gpus} GPUs, per seed."]
    return "\n".join(lines)


def replace_table(text: str, table: str) -> str:
    """`text` with the span between the cost-model markers replaced by `table`."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table + "\n" + text[end:]


def generated_span(text: str) -> str:
    """The table a doc carries between its cost-model markers."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m whalekit.report.cost_model",
                                     description="what a paper-scale run costs: rollouts, tokens and GPU-hours")
    parser.add_argument("--write", metavar="DOC", default=None,
                        help="replace the table between the cost-model markers of DOC (docs/scaling.md) "
                             "instead of printing it")
    args = parser.parse_args(argv)
    table = cost_table()
    if args.write:
        path = Path(args.write)
        path.write_text(replace_table(path.read_text(encoding="utf-8"), table), encoding="utf-8")
    else:
        print(table)


if __name__ == "__main__":
    main()
