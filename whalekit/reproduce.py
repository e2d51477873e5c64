"""Reproduce the paper headlessly: execute the notebook sequence with papermill for one
preset, one domain-run notebook per (domain, method, schedule, seed), then the analysis
notebooks that write every figure (PNG + PDF) and table (Markdown + CSV) into `figures/`
(the cpu preset's, committed) or `figures/<preset>/` (smoke, paper).

Why notebooks and not a script: the notebooks are what researchers read and re-run in
JupyterLab; executing exactly those (parameters injected by papermill, executed copies
kept under runs/<preset>/notebooks/) means the reproduction and the exploration never
drift apart. Finished runs are reused: the driver skips them, and a domain-run notebook
whose run is done and whose figure exists is not executed again.

    python -m whalekit.reproduce --preset smoke                    # minutes, tiny model; figures/smoke/
    make reproduce                                                 # the cpu preset, seeds 0 1 2; figures/

A finished run made by other code or another sampler (config.json's provenance) is
reported and made again, unless --reuse-foreign-runs keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.config import check_not_stale, resolve_config
from whalekit.methods import METHOD_NAMES
from whalekit.presets import load_preset
from whalekit.progress import OverallProgress, RunWatcher
from whalekit.provenance import REUSE_ENV, provenance, provenance_changes, recorded_provenance
from whalekit.results import export_run
from whalekit.run_set import Deadline, PlannedRun, Records
from whalekit.runs import NoRunsError, RunDir
from whalekit.schedules import parse_schedule
from whalekit.shutdown import exit_on_sigterm
from whalekit.widgets import HEADLESS_ENV

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
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


def figures_dir(preset: str, root: str | Path = "figures") -> Path:
    """Where a preset's figures and tables go by default: the `cpu` preset's are the ones
    committed in `root`; every other preset (smoke, paper, a preset file) writes below
    `root/<preset name>/`, so a fast smoke pass never overwrites the committed figures."""
    name = Path(preset).stem
    return Path(root) if name == "cpu" else Path(root) / name


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
                     adaptive: bool = True) -> list[Path]:
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
        return [p for d in domains for p in both(f"fig3_bottleneck_{d}")]
    if notebook == "05_schedule_grid":
        return both("fig4_schedule_grid") + both("table3_schedule_grid", table) if grid_domain else []
    if notebook == "06_adaptive":
        return both("fig6_adaptive") if adaptive else []
    if notebook == "07_harness_archive":
        return [p for d in domains for p in both(f"fig_lineage_{d}") + [figures / f"harness_diff_{d}.diff"]]
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
         grid: bool = True, zero: bool = True) -> list[Job]:
    """The whole sequence for a preset: the quickstart, every run (main comparison: each
    method at the preset's schedule on each domain; schedule grid: WHALE at each of the
    preset's grid schedules on the grid domain; grid=False leaves the grid and its notebook
    out; the zero start: the preset's reproduce.zero_start methods from the authors' h0,
    zero=False leaves them out), then the analysis notebooks (the adaptive one only when
    the adaptive method runs).
    `domains` defaults to the preset's domains except the toy one (which exists for
    mechanics), unless toy is all there is. Runs go under `runs_root/<preset>/`; figures
    default to `figures_dir(preset)`."""
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
        parameters = {**common, "domains": domains} if notebook in WITH_DOMAINS else dict(common)
        jobs.append(Job(notebook, parameters, notebooks_out / f"{notebook}.ipynb",
                        expected_outputs(notebook, figures, domains, grid_domain, "adaptive" in methods)))
    return jobs


DEFAULT_SEEDS = (0, 1, 2)


def run_set_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The run set a preset reproduces when the command line names none: its `reproduce`
    section's domains, methods, seeds and notebooks at once (`parallel`), else its domains
    except the toy one (which exists for mechanics, unless it is all there is), every
    method, seeds 0 1 2, one notebook at a time; `zero_start` lists the methods also run from
    the authors' faithful h0 (none by default). The smoke preset names a small set (one
    domain, one seed, two at once) so that its pass takes minutes."""
    section = data.get("reproduce") or {}
    unknown = sorted(set(section) - {"domains", "methods", "seeds", "parallel", "zero_start"})
    if unknown:
        raise ValueError(f"the preset's reproduce section has unknown keys {unknown}; "
                         "known: domains, methods, seeds, parallel, zero_start")
    domains = list(section.get("domains") or [d for d in data["domains"] if d != "toy"] or list(data["domains"]))
    missing = sorted(set(domains) - set(data["domains"]))
    if missing:
        raise ValueError(f"the preset's reproduce section names domains {missing} it has no section for")
    return {"domains": domains, "methods": list(section.get("methods") or METHODS),
            "seeds": [int(s) for s in section.get("seeds") or DEFAULT_SEEDS],
            "parallel": int(section.get("parallel", 1)), "zero_start": list(section.get("zero_start") or [])}


def reusable(job: Job) -> bool:
    """A domain-run notebook need not run again when its run is finished and its figure
    and executed copy exist (analysis notebooks always re-run: they are cheap)."""
    return bool(job.run_dir and RunDir(job.run_dir).done and job.output.exists()
                and all(p.exists() and p.stat().st_size > 0 for p in job.expected))


def foreign_runs(jobs: list[Job]) -> list[tuple[Job, list[str]]]:
    """The jobs whose run directory holds a run (finished or not) made by other code or
    with another sampler than the current ones, each with how its provenance differs
    (whalekit.provenance; a run that recorded none counts as foreign)."""
    current: dict[str, dict[str, Any]] = {}  # by requested sampler: hashing the package once each
    found = []
    for job in jobs:
        if job.run_dir is None or not RunDir(job.run_dir).config_path.exists():
            continue
        requested = str(RunDir(job.run_dir).config().get("sampler", "hf"))  # plan checked the config is current
        if requested not in current:
            current[requested] = provenance(requested)
        changes = provenance_changes(recorded_provenance(job.run_dir), current[requested])
        if changes:
            found.append((job, changes))
    return found


def handle_foreign_runs(jobs: list[Job], reuse: bool = False, log: Callable[[str], None] = print,
                        dry_run: bool = False) -> list[tuple[Job, list[str]]]:
    """Report every run made by other code or another sampler. Without `reuse` it is
    re-made: its folder moves to runs_root/foreign-runs/<preset>/<domain>/<run>-<time> (kept,
    out of the tables' reach) so the job runs again. With `reuse` it is kept and the
    driver is told to accept it (WHALEKIT_REUSE_FOREIGN_RUNS=1, inherited by the notebooks)."""
    found = foreign_runs(jobs)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for job, changes in found:
        assert job.run_dir is not None
        what = f"{job.label}: made by other code or another sampler ({'; '.join(changes)})"
        if reuse:
            log(f"{what}; reused (--reuse-foreign-runs)")
            continue
        target = job.run_dir.parents[2] / "foreign-runs" / job.run_dir.relative_to(job.run_dir.parents[2])
        target = target.with_name(f"{target.name}-{stamp}")
        if dry_run:
            log(f"{what}; would be re-made (--reuse-foreign-runs keeps it)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(job.run_dir), str(target))
        log(f"{what}; re-made, the old run moved to {target} (--reuse-foreign-runs keeps it)")
    if reuse and found and not dry_run:
        os.environ[REUSE_ENV] = "1"
    return found


def execute(job: Job, notebook_dir: Path = NOTEBOOK_DIR, kernel: str = "python3") -> None:
    import papermill

    os.environ[HEADLESS_ENV] = "1"  # inherited by the kernel: the trace viewer renders static HTML
    job.output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(notebook_dir / f"{job.notebook}.ipynb"), str(job.output),
                               parameters=job.parameters, kernel_name=kernel, progress_bar=False,
                               cwd=str(notebook_dir), log_output=False)
    missing = [str(p) for p in job.expected if not p.exists() or p.stat().st_size == 0]
    if missing:
        raise RuntimeError(f"{job.label}: finished but did not write {', '.join(missing)} (see {job.output})")


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


def run_jobs(jobs: list[Job], notebook_dir: Path = NOTEBOOK_DIR, kernel: str = "python3",
             log: Callable[[str], None] = print, watch_interval_s: float = 5.0,
             parallel: int = 1, records: Records | None = None) -> list[dict[str, Any]]:
    """Execute the jobs in order: a line per stage a run finishes (read from its events,
    the notebook's own output is not shown) and a line per job with the overall share of
    the work done and an ETA (whalekit.progress); returns and saves the timings.
    `parallel` > 1 runs that many domain-run notebooks at once (each in its own kernel);
    the quickstart still runs first and the analysis notebooks after every run. Worth it
    where a run's time is mostly one-threaded Python (imports, the tiny model: the smoke
    preset), not where the model's matmuls already fill every core (cpu preset).

    With `records` (the chunked reproduction): a run already recorded under results/ is
    skipped, a finished run is exported there at once, STATUS.md is rewritten after each
    run, and no run starts past the chunk's deadline; when the deadline stops the chunk,
    the analysis notebooks are left for the chunk that completes the set."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    overall = OverallProgress(job_costs(jobs), parallel=parallel)
    timings: list[dict[str, Any]] = [{} for _ in jobs]
    lock = threading.Lock()

    def one(index: int) -> None:
        job = jobs[index]
        if records is not None and job.planned is not None:
            if records.recorded(job.planned):
                with lock:
                    timings[index] = {"notebook": job.notebook, "label": job.label, "wall_s": 0.0, "reused": True}
                    log(overall.finish(index, f"{job.label} (recorded in {records.results_root})", 0.0, True))
                return
            if records.stopped or not records.may_start(job.planned):
                records.stopped = True
                return
            records.started(job.planned)
        elif records is not None and records.stopped:
            return  # the analysis notebooks wait for the chunk that completes the set
        started = time.perf_counter()
        reused = reusable(job)
        if not reused:
            with RunWatcher(job.run_dir, _prefixed(log, f"  {job.label}: "), watch_interval_s):
                execute(job, notebook_dir, kernel)
        wall = time.perf_counter() - started
        if records is not None and job.planned is not None:
            records.finished(job.planned)
        with lock:
            timings[index] = {"notebook": job.notebook, "label": job.label, "wall_s": round(wall, 1),
                              "reused": reused}
            log(overall.finish(index, job.label, wall, reused))

    with _threads_per_kernel(parallel):
        _run_in_batches(jobs, one, parallel)
    done = [t for t in timings if t]
    if done:
        write_timings(done, jobs[0].output.parent)
    return timings


@contextmanager
def _threads_per_kernel(parallel: int) -> Iterator[None]:
    """With `parallel` kernels at once, each kernel's OpenMP / MKL threads get an equal share
    of the cores (kernels inherit the environment): `parallel` kernels each spinning a
    thread per core thrash the cores (measured on 2 cores: a smoke run took 145 s instead of
    25). Values the user set are kept; the environment is restored afterwards."""
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {name: os.environ.get(name) for name in names}
    if parallel > 1:
        for name in names:
            os.environ.setdefault(name, str(max(1, (os.cpu_count() or 1) // parallel)))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_in_batches(jobs: list[Job], one: Callable[[int], None], parallel: int) -> None:
    """Jobs in order, except that consecutive domain-run jobs run `parallel` at a time."""
    index = 0
    while index < len(jobs):
        batch = [index]
        while parallel > 1 and jobs[index].notebook == DOMAIN_RUN and batch[-1] + 1 < len(jobs) \
                and jobs[batch[-1] + 1].notebook == DOMAIN_RUN:
            batch.append(batch[-1] + 1)
        if len(batch) == 1:
            one(index)
        else:
            _run_at_once(batch, one, parallel)
        index = batch[-1] + 1


def _run_at_once(indices: list[int], one: Callable[[int], None], parallel: int) -> None:
    """`one(i)` for each index, `parallel` at a time, started in order. A job is started only
    when a slot frees and nothing has failed; after a failure the running jobs end (their
    runs are kept, a later pass reuses them) and the first failure is raised."""
    pending = list(indices)
    running: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while pending or running:
            while pending and len(running) < parallel:
                running.add(pool.submit(one, pending.pop(0)))
            done, running = wait(running, return_when=FIRST_COMPLETED)
            failed = [f.exception() for f in done if f.exception() is not None]
            if failed:
                wait(running)
                raise failed[0]  # type: ignore[misc]


def _prefixed(log: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda line: log(prefix + line)


def write_timings(timings: list[dict[str, Any]], folder: Path) -> Path:
    """timings.json and a Markdown table of wall time per notebook: the closing note."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "timings.json").write_text(json.dumps(timings, indent=1))
    lines = ["| notebook | wall time (s) |", "| --- | --- |"]
    lines += [f"| {t['label']} | {'reused' if t['reused'] else t['wall_s']} |" for t in timings]
    total = sum(t["wall_s"] for t in timings)
    lines.append(f"| total | {total:.1f} |")
    path = folder / "timings.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # `make reproduce`: a killed reproduction shuts its notebook's kernel down
        exit_on_sigterm()

    parser = argparse.ArgumentParser(prog="python -m whalekit.reproduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help="smoke | cpu | paper, or a preset YAML file")
    parser.add_argument("--runs-root", default="runs", help="run directories and executed notebooks go here")
    parser.add_argument("--figures", default=None, help="figures (PNG, PDF) and tables (MD, CSV) go here "
                        "(default: figures/ for the cpu preset, figures/<preset>/ for any other)")
    parser.add_argument("--domains", nargs="*", help="default: the preset's reproduce.domains, else its domains "
                        "except toy")
    parser.add_argument("--methods", nargs="*", help=f"default: the preset's reproduce.methods, else all "
                        f"({', '.join(METHODS)})")
    parser.add_argument("--seeds", nargs="*", type=int, default=None,
                        help="run seeds (default: the preset's reproduce.seeds, else 0 1 2; every table interval "
                             "is over seeds x test problems)")
    parser.add_argument("--reuse-foreign-runs", action="store_true",
                        help="keep finished runs made by other code or another sampler (always reported); "
                             "without it they are made again")
    parser.add_argument("--no-grid", action="store_true", help="leave out the schedule grid's runs and notebook")
    parser.add_argument("--parallel", type=int, default=None,
                        help="domain-run notebooks executed at once (default: the preset's reproduce.parallel, "
                             "else 1)")
    parser.add_argument("--no-zero-start", action="store_true", help="leave out the zero-start runs (the preset's "
                        "reproduce.zero_start methods from the authors' faithful h0)")
    parser.add_argument("--results", default="results", help="committed run records: a run recorded here for the "
                        "same configuration and code is skipped; each finished run is exported here")
    parser.add_argument("--max-hours", type=float, default=None,
                        help="start no run after this many hours (nor one this machine's timings say would end "
                             "past them): the chunk stops at a run boundary and the same command continues")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel that executes the notebooks")
    parser.add_argument("--dry-run", action="store_true", help="list the notebook executions and stop")
    args = parser.parse_args(argv)
    jobs = plan(args.preset, args.runs_root, args.figures, args.domains, args.methods, args.seeds,
                grid=not args.no_grid, zero=not args.no_zero_start)
    records = Records([j.planned for j in jobs if j.planned is not None], Path(args.results), export_run,
                      Deadline(args.max_hours), log=lambda line: print(line, flush=True))
    if args.dry_run:
        for job in jobs:
            print(job.label, json.dumps(job.parameters))
        print(records.summary(), file=sys.stderr)
        handle_foreign_runs(jobs, args.reuse_foreign_runs, log=lambda line: print(line, file=sys.stderr),
                            dry_run=True)
        return 0
    print(records.summary(), flush=True)  # the plan first: done / left per tier and an ETA
    records.write_status()
    handle_foreign_runs(jobs, args.reuse_foreign_runs, log=lambda line: print(line, flush=True))
    started = time.perf_counter()
    parallel = args.parallel if args.parallel is not None else run_set_defaults(load_preset(args.preset))["parallel"]
    run_jobs(jobs, kernel=args.kernel, log=lambda line: print(line, flush=True), parallel=parallel, records=records)
    records.write_status()
    if records.stopped:
        print(f"chunk ended after {time.perf_counter() - started:.0f} s at a run boundary (--max-hours):\n"
              f"{records.summary()}\nstatus in {records.status_path()}", flush=True)
        return 0
    figures = jobs[0].parameters["figures"]
    print(f"done in {time.perf_counter() - started:.0f} s: figures and tables in {figures}, "
          f"executed notebooks and timings.md in {jobs[0].output.parent}, status in {records.status_path()}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
