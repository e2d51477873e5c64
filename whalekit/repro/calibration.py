"""Calibration: score named harnesses with a preset's model, sampler and data, so a
preset's starting point can be checked (h0 clearly above 0, far below the ceiling, a
better harness measurably ahead). The `bench/calibrate_<domain>.py` scripts are thin
command lines over this module.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_math.py --preset cpu --harness h0 h1

Harness names: `h0` is the preset's initial harness (`initial_harness`: the cpu preset
starts from `h0_cpu`), `h0_faithful` the authors' h0, any other name a file under the
domain's `harnesses/`, a `.py` path, and `name+mechanism+...` applies catalogue
mechanisms on top (`h0_faithful+few_shot_worked_example`).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from whalekit.domains.base import Domain, get_domain
from whalekit.domains.mechanisms import code_body, compose
from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.run.driver import mean_at_k, resolve_config
from whalekit.run.provenance import provenance
from whalekit.samplers.base import Sampler, SamplingParams
from whalekit.samplers.models import load_policy
from whalekit.types import Task, Trajectory

SPLITS = ("test", "train", "search")
DESIGN_SPLITS = ("train", "search", "calibration")  # what a design choice may read: never test
# Presets whose design is pre-registered off the test split (docs/reproduction-v3.md): their
# calibration refuses the test split, and tests/test_reproduction_v3.py checks their records.
OFF_TEST_PRESETS = ("cpu-v3",)


class CalibratedOnTestError(ValueError):
    """A design choice of a pre-registered preset would read (or has read) the test split."""


def check_calibration_splits(folder: Path) -> list[Path]:
    """Every calibration record (*.json) under `folder` names a design split (`DESIGN_SPLITS`);
    returns the records checked, raises naming the first that does not."""
    checked = []
    for path in sorted(Path(folder).glob("*.json")):
        split = json.loads(path.read_text(encoding="utf-8")).get("split")
        if split not in DESIGN_SPLITS:
            raise CalibratedOnTestError(f"{path}: calibrated on split {split!r}; a pre-registered design "
                                            f"chooses on {', '.join(DESIGN_SPLITS)} only")
        checked.append(path)
    return checked


def harness_source(domain: Domain, spec: str, initial: str = "h0") -> str:
    """The source a harness name stands for (see the module docstring)."""
    base, *mechanisms = spec.split("+")
    if base.endswith(".py"):
        source = Path(base).read_text()
    else:
        source = domain.harness_source(initial if base == "h0" else base)
    catalogue = {m.name: m for m in domain.mechanisms() + domain.prompt_wordings()}
    unknown = [name for name in mechanisms if name not in catalogue]
    if unknown:
        raise ValueError(f"unknown {domain.name} mechanisms {unknown}; known: {', '.join(sorted(catalogue))}")
    return compose(source, [catalogue[name] for name in mechanisms])


@dataclass
class Calibration:
    """One harness's scores on one split: mean@k and what the episodes did."""

    harness: str
    source_sha256: str  # of the harness source scored
    code_sha256: str  # of its code (calibration.code_hash): a record goes stale when the code changes
    mean_at_k: float
    k: int
    problems: int
    wall_s: float
    format_rate: float  # share of episodes whose final answer was in the asked form
    flags: dict[str, float] = field(default_factory=dict)  # mean of every numeric behaviour flag
    by_subset: dict[str, float] = field(default_factory=dict)
    failure_modes: dict[str, int] = field(default_factory=dict)
    errors: int = 0

    def line(self) -> str:
        return f"{self.harness} mean@{self.k} = {self.mean_at_k:.3f}"


def format_rate(trajectories: list[Trajectory]) -> float:
    """Share of episodes that answered in the asked form: the domain's `format_valid`
    flag where it has one, else whether an answer was extracted at all."""
    values = [float(t.flags["format_valid"]) if "format_valid" in t.flags else float(t.final_answer is not None)
              for t in trajectories]
    return mean(values) if values else 0.0


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def code_hash(source: str) -> str:
    """Hash of a harness's code, its module docstring left out and the layout normalised
    (ast.unparse): a calibration record stays valid when only the words around it change,
    and goes stale when the code does."""
    tree = ast.parse(source)
    tree.body = code_body(tree)
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest()


def summarize(domain: Domain, name: str, trajectories: list[Trajectory], k: int, wall_s: float,
              source: str = "") -> Calibration:
    metrics = mean_at_k(trajectories, domain)  # the driver's own test metrics: score, per subset, flags
    failures: dict[str, int] = defaultdict(int)
    for trajectory in trajectories:
        failures[str(domain.failure_mode(trajectory))] += 1
    return Calibration(harness=name, source_sha256=source_hash(source), code_sha256=code_hash(source),
                       mean_at_k=metrics["mean_at_k"], k=k, problems=len({t.task_id for t in trajectories}),
                       wall_s=wall_s, format_rate=format_rate(trajectories), flags=metrics["behaviour"],
                       by_subset=metrics["by_subset"],
                       failure_modes=dict(sorted(failures.items())),
                       errors=sum(1 for t in trajectories if t.error))


def calibrate(domain: Domain, tasks: list[Task], harnesses: list[str], sampler: Sampler, samples: int,
              sampling: SamplingParams | None = None, seed: int = 0, initial: str = "h0",
              max_new_tokens_cap: int | None = None, scheduling: str = "auto",
              dump: str | None = None) -> list[Calibration]:
    """Roll out every harness `samples` times per task and summarize each (printing as it goes)."""
    results = []
    for name in harnesses:
        source = harness_source(domain, name, initial)
        harness = InProcessHarness(source)
        episodes = [Episode(task, harness, i) for task in tasks for i in range(samples)]
        started = time.perf_counter()
        trajectories = rollout(domain, episodes, sampler,
                               RolloutConfig(sampling=sampling or SamplingParams(), seed=seed, description=name,
                                             scheduling=scheduling, max_new_tokens_cap=max_new_tokens_cap))
        result = summarize(domain, name, trajectories, samples, time.perf_counter() - started, source)
        results.append(result)
        print_calibration(result)
        if dump:
            with open(f"{dump}.{name}.jsonl", "w") as handle:
                for trajectory in trajectories:
                    handle.write(json.dumps(trajectory.to_json()) + "\n")
    return results


def print_calibration(result: Calibration) -> None:
    print(result.line(), flush=True)
    print(f"  format rate {result.format_rate:.3f}   {result.problems} problems x {result.k} samples, "
          f"{result.wall_s:.0f} s wall, {result.errors} errors")
    print("  flags: " + ", ".join(f"{k} {v:.3f}" for k, v in result.flags.items()))
    print("  per subset: " + ", ".join(f"{k} {v:.3f}" for k, v in result.by_subset.items()))
    print("  failure modes: " + ", ".join(f"{k} {v}" for k, v in result.failure_modes.items()), flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every calibration script shares."""
    parser.add_argument("--preset", default="cpu", help="model, sampler, data, sampling and h0 come from it")
    parser.add_argument("--harness", nargs="+", default=["h0", "h1"],
                        help="h0 (the preset's initial harness), h0_faithful, h1, a .py path; +mechanism applies one")
    parser.add_argument("--split", default=None, choices=SPLITS,
                        help="the preset's split to score on (default: search for the presets calibrated off test, "
                             f"{', '.join(OFF_TEST_PRESETS)}, which refuse test; test for the others, as v2's "
                             "documented calibrations ran)")
    parser.add_argument("--n", type=int, default=None, help="first N problems of the split (default: all)")
    parser.add_argument("--n-test", type=int, default=None, dest="n", help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=int, default=None, help="samples per problem (default: the preset's eval_k)")
    parser.add_argument("--seed", type=int, default=0, help="the split seed, as a run's --seed")
    parser.add_argument("--sampler", default=None, choices=["auto", "hf", "vllm"], help="default: the preset's")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "lockstep"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="a RunConfig override, e.g. domain_options={\"mix\": {\"arithmetic\": 1}}")
    parser.add_argument("--dump", default=None, help="write trajectories as JSONL to DUMP.<harness>.jsonl")
    parser.add_argument("--json", default=None, help="also write the summary here")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: expected KEY=JSON")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def run_from_arguments(domain_name: str, args: argparse.Namespace,
                       before: Any = None) -> tuple[list[Calibration], dict[str, Any]]:
    """What a calibration script does: resolve the preset, cut its splits exactly as a run
    with --seed does, score the harnesses, write the JSON summary. `before(domain, tasks,
    samples)` may print and return extra summary fields (chess: the random-legal floor)."""
    off_test = Path(args.preset).stem in OFF_TEST_PRESETS
    if args.split is None:
        args.split = "search" if off_test else "test"
    if args.split not in DESIGN_SPLITS and off_test:
        raise CalibratedOnTestError(f"preset {args.preset} is calibrated off the test split "
                                        "(docs/reproduction-v3.md): use --split search or --split train")
    exit_on_sigterm()  # a terminated calibration closes vLLM's engine process instead of orphaning it
    config = resolve_config(args.preset, domain=domain_name, method="harness_only", seed=args.seed,
                            **parse_overrides(args.set))
    domain = get_domain(domain_name, **config.domain_options)
    splits = domain.load_splits(n_train=config.n_train, n_search=config.n_search, n_test=config.n_test,
                                seed=config.seed, **config.split_options)
    tasks = getattr(splits, args.split)[: args.n]
    samples = args.samples or config.eval_k
    sampler_kind = args.sampler or config.sampler
    print(f"preset {args.preset}: {domain_name} {args.split} split, {len(tasks)} problems x {samples} samples, "
          f"T {config.eval_sampling.temperature} top_k {config.eval_sampling.top_k}, h0 = {config.initial_harness}, "
          f"sampler {sampler_kind}, model {config.model}", flush=True)
    extra = before(domain, tasks, samples) if before else {}
    policy = load_policy(config.model, sampler=sampler_kind,
                         vllm_options=config.vllm_options if sampler_kind != "hf" else None)
    try:
        results = calibrate(domain, tasks, args.harness, policy.sampler, samples,
                            sampling=config.eval_sampling, seed=args.seed,
                            initial=config.initial_harness, max_new_tokens_cap=config.max_new_tokens_cap,
                            scheduling=args.scheduling, dump=args.dump)
    finally:
        close = getattr(policy.sampler, "close", None)
        if close:
            close()
    summary = {"provenance": {**provenance(sampler_kind, policy.sampler), "cpu_kind": cpu_kind()},
               "preset": args.preset, "domain": domain_name, "split": args.split, "problems": len(tasks),
               "samples": samples, "seed": args.seed, "initial_harness": config.initial_harness,
               "domain_options": config.domain_options, "split_options": config.split_options,
               "temperature": config.eval_sampling.temperature, "top_k": config.eval_sampling.top_k,
               "model": config.model,
               "sampler": sampler_kind, "command": "python " + " ".join(sys.argv), **extra,
               "harnesses": {r.harness: r.__dict__ for r in results}}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return results, summary
