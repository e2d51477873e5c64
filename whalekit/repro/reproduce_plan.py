"""The plan of `make reproduce`: which notebooks it executes for a preset, in which order,
with which papermill parameters, and what each must leave behind (figures, tables, runs).

Why a module of its own: the plan is pure bookkeeping (no kernel starts, nothing is
written), so `--dry-run`, the progress line's job costs and the notebooks' own look-ups
(`preset_with_runs`, `run_figure_stem`) read it without touching the executor
(whalekit.repro.notebook_runner) or the command line (whalekit.repro.reproduce).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.infra.runs import NoRunsError, RunDir
from whalekit.presets import load_preset
from whalekit.records.results import figures_dir
from whalekit.repro.run_set import PlannedRun
from whalekit.run.config import check_not_stale, resolve_config
from whalekit.run.methods import METHOD_NAMES
from whalekit.run.schedules import parse_schedule

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
METHODS = METHOD_NAMES
QUICKSTART, DOMAIN_RUN = "01_quickstart", "02_domain_run"
ANALYSIS = ("03_main_comparison", "04_bottleneck", "05_schedule_grid", "06_adaptive", "07_harness_archive")
NOTEBOOKS = (QUICKSTART, DOMAIN_RUN, *ANALYSIS)
TUTORIALS = ("08_custom_domain",)  # executed by the tests, not part of the reproduction
WITH_DOMAINS = ("03_main_comparison", "04_bottleneck", "07_harness_archive")  # take a `domains` parameter


@dataclass
class Job:
    """One notebook execution: which notebook, its papermill parameters, where the
    executed copy goes, and the files it must leave behind."""

    notebook: str
    parameters: dict[str, Any]
    output: Path
    expected: list[Path] = field(default_factory=list)
    run_dir: Path | None = None  # domain-run notebooks: the run they produce
    planned: PlannedRun | None = None  # domain-run notebooks: the run's tier and configuration

    @property
    def label(self) -> str:
        if self.notebook == DOMAIN_RUN:
            return f"{self.notebook} {self.parameters['domain']}/{self.run_dir.name if self.run_dir else ''}"
        return self.notebook


def preset_with_runs(runs_root: str | Path, preset: str, figures: str | Path, fallback: str = "smoke",
                     log: Callable[[str], None] = print) -> tuple[str, Path]:
    """(preset, figures folder) for an analysis notebook: `preset` itself when
    runs_root/<preset> holds a finished run; else the `fallback` preset's runs when there
    are some (saying so, with figures going to `figures/<fallback>` so they
    never overwrite the committed ones); else NoRunsError naming the command to run."""

    def finished(name: str) -> bool:
        return any(RunDir(p.parent).done for p in (Path(runs_root) / Path(name).stem).glob("*/*/config.json"))

    if finished(preset):
        return preset, Path(figures)
    if Path(preset).stem != fallback and finished(fallback):
        fallback_figures = Path(figures) / fallback
        log(f"no finished runs under {Path(runs_root) / Path(preset).stem} yet: showing the {fallback} runs under "
            f"{Path(runs_root) / fallback} instead (figures go to {fallback_figures}); `make reproduce "
            f"PRESET={Path(preset).stem}` makes the {Path(preset).stem} ones")
        return fallback, fallback_figures
    raise NoRunsError(f"no finished runs under {Path(runs_root) / Path(preset).stem}", preset)


def run_figure_stem(figures: Path, domain: str, run_name: str) -> Path:
    """Where notebook 02 saves one run's curve."""
    return Path(figures) / "runs" / f"{domain}_{run_name}"


def expected_outputs(notebook: str, figures: Path, domains: list[str], grid_domain: str | None = None,
                     adaptive: bool = True, seeds: tuple[int, ...] | list[int] = (0,)) -> list[Path]:
    """The figures and tables an analysis notebook (or the quickstart) must write."""
    figures = Path(figures)

    def both(stem: str, kinds: tuple[str, ...] = (".png", ".pdf")) -> list[Path]:
        return [figures / f"{stem}{kind}" for kind in kinds]

    table = (".md", ".csv")
    if notebook == QUICKSTART:
        return [figures / "quickstart_trace.html"]
    if notebook == "03_main_comparison":
        return both("table2_main", table) + both("table2_by_subset", table) + both("fig1b_best_accuracy") \
            + both("fig2_best_so_far")
    if notebook == "04_bottleneck":
        return both("fig3_levers") + [p for d in domains for p in both(f"fig3_bottleneck_{d}")]
    if notebook == "05_schedule_grid":
        return both("fig4_schedule_grid") + both("table3_schedule_grid", table) if grid_domain else []
    if notebook == "06_adaptive":
        return both("fig6_adaptive") if adaptive else []
    if notebook == "07_harness_archive":
        return [p for d in domains for s in seeds
                for p in both(f"fig_lineage_{d}_s{s}") + [figures / f"harness_diff_{d}_s{s}.diff"]]
    raise ValueError(f"unknown notebook {notebook!r}; known: {', '.join(NOTEBOOKS)}")


TIER_A = ("whale", "weight_only", "harness_only", "fst")  # Table 2's core; tier b: the other methods
ZERO_START_HARNESS = "h0_faithful"


def run_set(domains: list[str], methods: list[str], seeds: list[int], grid_domain: str | None,
            grid_schedules: list[Any], zero_start: list[str]
            ) -> list[tuple[str, str, str, str | None, int, dict[str, Any]]]:
    """(tier, domain, method, schedule, seed, overrides) of every run, in the order a chunked
    reproduction makes them: tier a (TIER_A), then b (the other methods), then c (the
    schedule grid), then d (the zero start from the authors' h0); within a tier seed by
    seed, so that a partial set is a complete comparison at fewer seeds."""
    tier_a = [m for m in methods if m in TIER_A]
    tier_b = [m for m in methods if m not in TIER_A]
    runs: list[tuple[str, str, str, str | None, int, dict[str, Any]]] = []
    for tier, chosen in (("a", tier_a), ("b", tier_b)):
        runs += [(tier, d, m, None, s, {}) for s in seeds for d in domains for m in chosen]
    if grid_domain:
        runs += [("c", grid_domain, "whale", "{:g},{}".format(*parse_schedule(sch)), s, {})
                 for s in seeds for sch in grid_schedules]
        if grid_domain not in domains:  # the grid compares against stagewise on its domain
            runs += [("c", grid_domain, "stagewise", None, s, {}) for s in seeds if "stagewise" in methods]
    runs += [("d", d, m, None, s, {"initial_harness": ZERO_START_HARNESS})
             for s in seeds for d in domains for m in zero_start]
    return runs


def plan(preset: str = "cpu", runs_root: str | Path = "runs", figures: str | Path | None = None,
         domains: list[str] | None = None, methods: list[str] | None = None,
         seeds: list[int] | tuple[int, ...] | None = None, quickstart_domain: str | None = None,
         grid: bool = True, zero: bool = True, results: str | Path = "results") -> list[Job]:
    """The whole sequence for a preset: the quickstart, every run (main comparison: each
    method at the preset's schedule on each domain; schedule grid: WHALE at each of the
    preset's grid schedules on the grid domain; grid=False leaves the grid and its notebook
    out; the zero start: the preset's reproduce.zero_start methods from the authors' h0,
    zero=False leaves them out), then the analysis notebooks (the adaptive one only when
    the adaptive method runs).
    `domains` defaults to the preset's domains except the toy one (which exists for
    mechanics), unless toy is all there is. Runs go under `runs_root/<preset>/`; figures
    default to `figures_dir(preset)`. The analysis notebooks read the records under `results`
    (whalekit.records.results.choose_root: the runs when it holds none of the preset)."""
    data = load_preset(preset)
    preset_name = Path(preset).stem
    runs_root = Path(runs_root).resolve()
    figures = Path(figures if figures is not None else figures_dir(preset)).resolve()
    notebooks_out = runs_root / preset_name / "notebooks"
    defaults = run_set_defaults(data)
    domains = list(domains) if domains is not None else defaults["domains"]
    methods = list(methods or defaults["methods"])
    seeds = list(seeds) if seeds is not None else defaults["seeds"]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    common = {"preset": preset, "runs_root": str(runs_root), "figures": str(figures)}
    # The quickstart shows a tool call: math, where code_prefill makes even the tiny model call Python.
    quickstart_domain = quickstart_domain or ("math" if "math" in data["domains"] else next(iter(data["domains"])))
    quickstart = {"domain": quickstart_domain, **({} if quickstart_domain == "math" else {"mechanism": None})}
    jobs = [Job(QUICKSTART, {**common, **quickstart}, notebooks_out / f"{QUICKSTART}.ipynb",
                expected_outputs(QUICKSTART, figures, domains))]
    grid_spec = (data.get("grid") or {}) if grid else {}
    grid_domain = grid_spec.get("domain") if "whale" in methods else None
    zero_start = [m for m in defaults["zero_start"] if m in methods] if zero else []
    seen: set[Path] = set()
    for tier, domain, method, schedule, seed, overrides in run_set(domains, methods, seeds, grid_domain,
                                                                   grid_spec.get("schedules", []), zero_start):
        config = resolve_config(preset, domain=domain, method=method, schedule=schedule, seed=seed,
                                runs_root=str(runs_root), **overrides)
        if config.run_dir in seen:
            continue  # e.g. the grid's (0.6, 6) is the main comparison's WHALE run
        seen.add(config.run_dir)
        check_not_stale(config)  # before hours of work, not after
        stem = run_figure_stem(figures, domain, config.run_name)
        parameters: dict[str, Any] = {**common, "domain": domain, "method": method, "schedule": schedule,
                                      "seed": seed, **({"overrides": overrides} if overrides else {})}
        jobs.append(Job(DOMAIN_RUN, parameters, notebooks_out / f"{DOMAIN_RUN}-{domain}-{config.run_name}.ipynb",
                        [stem.parent / f"{stem.name}.png", stem.parent / f"{stem.name}.pdf"], config.run_dir,
                        PlannedRun(tier, config, overrides)))
    for notebook in ANALYSIS:
        if (notebook == "05_schedule_grid" and not grid) or (notebook == "06_adaptive" and "adaptive" not in methods):
            continue  # nothing for it to plot
        parameters = {**common, "results_root": str(Path(results).resolve()),
                      **({"domains": domains} if notebook in WITH_DOMAINS else {})}
        jobs.append(Job(notebook, parameters, notebooks_out / f"{notebook}.ipynb",
                        expected_outputs(notebook, figures, domains, grid_domain, "adaptive" in methods, seeds)))
    return jobs


DEFAULT_SEEDS = (0, 1, 2)


def run_set_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The run set a preset reproduces when the command line names none: its `reproduce`
    section's domains, methods, seeds and notebooks at once (`parallel`), else its domains
    except the toy one (which exists for mechanics, unless it is all there is), every
    method, seeds 0 1 2, one notebook at a time; `zero_start` lists the methods also run from
    the authors' faithful h0 (none by default); `confirm` (default true) makes `make reproduce`
    start runs only with --yes, for a set that takes hours. The smoke preset names a small set (one
    domain, one seed, two at once) so that its pass takes minutes."""
    section = data.get("reproduce") or {}
    unknown = sorted(set(section) - {"domains", "methods", "seeds", "parallel", "zero_start", "confirm"})
    if unknown:
        raise ValueError(f"the preset's reproduce section has unknown keys {unknown}; "
                         "known: domains, methods, seeds, parallel, zero_start, confirm")
    domains = list(section.get("domains") or [d for d in data["domains"] if d != "toy"] or list(data["domains"]))
    missing = sorted(set(domains) - set(data["domains"]))
    if missing:
        raise ValueError(f"the preset's reproduce section names domains {missing} it has no section for")
    return {"domains": domains, "methods": list(section.get("methods") or METHODS),
            "seeds": [int(s) for s in section.get("seeds") or DEFAULT_SEEDS],
            "parallel": int(section.get("parallel", 1)), "zero_start": list(section.get("zero_start") or []),
            "confirm": bool(section.get("confirm", True))}


def job_costs(jobs: Sequence[Any]) -> list[float]:
    """Work per Job: a domain-run job costs its run's rollout budget, an
    analysis notebook 0 (seconds). In weight_steps mode (no fixed rollout total) a run counts
    its weight steps times its batch's rollouts; a budget of unknown shape counts as 1."""
    costs = []
    for job in jobs:
        if getattr(job, "run_dir", None) is None:
            costs.append(0.0)
            continue
        p = job.parameters
        config = resolve_config(p["preset"], domain=p["domain"], method=p["method"], schedule=p.get("schedule"),
                                seed=p["seed"], runs_root=p["runs_root"])
        budget = config.budget
        if isinstance(budget, (int, float)):
            costs.append(float(budget))
        elif getattr(budget, "mode", None) == "rollouts":
            costs.append(float(budget.rollouts))
        elif getattr(budget, "mode", None) == "weight_steps":
            per_step = config.rsft.batch_problems * config.rsft.samples_per_problem
            costs.append(float(max(budget.weight_steps, budget.search_iterations, 1) * per_step))
        else:
            costs.append(1.0)
    return costs
