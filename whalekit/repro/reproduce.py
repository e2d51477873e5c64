"""Reproduce the paper headlessly: execute the notebook sequence with papermill for one
preset, one domain-run notebook per (domain, method, schedule, seed), then the analysis
notebooks that write every figure (PNG + PDF) and table (Markdown + CSV) into `figures/`
(the cpu preset's, committed) or `figures/<preset>/` (smoke, paper).

Why notebooks and not a script: the notebooks are what researchers read and re-run in
JupyterLab; executing exactly those (parameters injected by papermill, executed copies
kept under runs/<preset>/notebooks/) means the reproduction and the exploration never
drift apart. Finished runs are reused: the driver skips them, and a domain-run notebook
whose run is done and whose figure exists is not executed again.

    python -m whalekit.repro.reproduce --preset smoke                    # minutes, tiny model; figures/smoke/
    make reproduce                                                 # the cpu preset, seeds 0 1 2; figures/

A finished run made by other code or another sampler (config.json's provenance) is
reported and made again, unless --reuse-foreign-runs keeps it.

This module is the command and its flow; what runs is planned in whalekit.repro.reproduce_plan
and executed by whalekit.repro.notebook_runner.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whalekit.infra.runs import RunDir
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.presets import load_preset
from whalekit.records.results import DEFAULT_FIGURES_PRESET, export_run, records_dir
from whalekit.repro.notebook_pages import PAGES, render_pages
from whalekit.repro.notebook_runner import run_jobs
from whalekit.repro.reproduce_plan import ANALYSIS, METHODS, QUICKSTART, Job, plan, run_set_defaults
from whalekit.repro.run_set import Deadline, Records
from whalekit.run.provenance import REUSE_ENV, provenance, provenance_changes, recorded_provenance


def foreign_runs(jobs: list[Job]) -> list[tuple[Job, list[str]]]:
    """The jobs whose run directory holds a run (finished or not) made by other code or
    with another sampler than the current ones, each with how its provenance differs
    (whalekit.run.provenance; a run that recorded none counts as foreign)."""
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


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # `make reproduce`: a killed reproduction shuts its notebook's kernel down
        exit_on_sigterm()

    parser = argparse.ArgumentParser(prog="python -m whalekit.repro.reproduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help="smoke | cpu | cpu-v3 | paper, or a preset YAML file")
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
    parser.add_argument("--results", default=None, help="run records: a run recorded here for the same configuration "
                        "and code is skipped; each finished run is exported here (default: results/ for the cpu "
                        "preset, whose records are committed; <runs-root>/records/ for any other)")
    parser.add_argument("--max-hours", type=float, default=None,
                        help="start no run after this many hours (nor one this machine's timings say would end "
                             "past them): the chunk stops at a run boundary and the same command continues")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel that executes the notebooks")
    parser.add_argument("--dry-run", action="store_true", help="list the notebook executions and stop")
    parser.add_argument("--yes", action="store_true", help="start the runs that are left without asking (`make "
                        "reproduce YES=1`); without it a preset whose set takes hours asks first, or, not run from a "
                        "terminal, prints the plan and exits with status 2")
    args = parser.parse_args(argv)
    args.results = str(Path(args.results if args.results is not None else records_dir(args.preset, args.runs_root))
                       .resolve())
    jobs = plan(args.preset, args.runs_root, args.figures, args.domains, args.methods, args.seeds,
                grid=not args.no_grid, zero=not args.no_zero_start, results=args.results)
    # STATUS.md lists the preset's whole set, whatever this chunk selects
    whole = plan(args.preset, args.runs_root, args.figures, results=args.results)
    records = Records([j.planned for j in whole if j.planned is not None], Path(args.results), export_run,
                      Deadline(args.max_hours), log=lambda line: print(line, flush=True),
                      selected=[j.planned for j in jobs if j.planned is not None])
    if args.dry_run:
        for job in jobs:
            print(job.label, json.dumps(job.parameters))
        print(records.summary(), file=sys.stderr)
        handle_foreign_runs(jobs, args.reuse_foreign_runs, log=lambda line: print(line, file=sys.stderr),
                            dry_run=True)
        return 0
    print(records.summary(), flush=True)  # the plan first: done / left per tier and an ETA
    defaults = run_set_defaults(load_preset(args.preset))
    left = records.left()
    if left and defaults["confirm"] and not args.yes and not _confirmed(left):
        print(f"{left} run(s) left to make (the ETA above): nothing started. `make reproduce YES=1` (or --yes) "
              f"starts them, `MAX_HOURS=N` in chunks that stop cleanly; `make reproduce DRY_RUN=1` lists them",
              file=sys.stderr)
        return 2
    if not left:
        print(f"every run of this selection is recorded in {args.results}: making the figures and tables from the "
              "records", flush=True)
        # the runs' notebooks have nothing to do, and the quickstart's trace is a live sample: kept when present
        jobs = [j for j in jobs if j.planned is None
                and not (j.notebook == QUICKSTART and all(p.exists() for p in j.expected))]
    records.write_status()
    handle_foreign_runs(jobs, args.reuse_foreign_runs, log=lambda line: print(line, flush=True))
    started = time.perf_counter()
    parallel = args.parallel if args.parallel is not None else defaults["parallel"]
    run_jobs(jobs, kernel=args.kernel, log=lambda line: print(line, flush=True), parallel=parallel, records=records)
    records.write_status()
    if records.stopped:
        print(f"chunk ended after {time.perf_counter() - started:.0f} s at a run boundary (--max-hours):\n"
              f"{records.summary()}\nstatus in {records.status_path()}", flush=True)
        return 0
    figures = jobs[0].parameters["figures"]
    if Path(args.preset).stem == DEFAULT_FIGURES_PRESET:  # the repository's figures: its rendered notebooks too
        executed = [j.output for j in jobs if j.notebook in ANALYSIS and j.output.exists()]
        pages = render_pages(executed, PAGES)
        print(f"rendered {len(pages)} notebook pages in {PAGES}", flush=True)
    print(f"done in {time.perf_counter() - started:.0f} s{' (figures from the records only)' if not left else ''}: "
          f"figures and tables in {figures}, "
          f"executed notebooks and timings.md in {jobs[0].output.parent}, status in {records.status_path()}",
          flush=True)
    return 0


def _confirmed(left: int) -> bool:
    """Asked at a terminal whether to start the runs left; never asked elsewhere (a script,
    CI, a notebook), where only --yes starts them."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"start the {left} run(s) left now? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


if __name__ == "__main__":
    sys.exit(main())
