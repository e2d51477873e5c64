"""Executing the planned notebooks with papermill: one kernel per notebook, consecutive
domain-run notebooks `parallel` at a time, a progress line per finished job, the run
records kept up to date between runs, and the wall times written at the end.

Why a module of its own: this is the only part of `make reproduce` that starts kernels
and takes hours; the plan it executes (whalekit.repro.reproduce_plan) and the command line
that calls it (whalekit.repro.reproduce) stay readable without the threads and the timing.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager

from whalekit.infra.progress import OverallProgress, RunWatcher
from whalekit.infra.runs import RunDir
from whalekit.report.widgets import HEADLESS_ENV
from whalekit.repro.reproduce_plan import DOMAIN_RUN, NOTEBOOK_DIR, Job, job_costs
from whalekit.repro.run_set import Records


def reusable(job: Job) -> bool:
    """A domain-run notebook need not run again when its run is finished and its figure
    and executed copy exist (analysis notebooks always re-run: they are cheap)."""
    return bool(job.run_dir and RunDir(job.run_dir).done and job.output.exists()
                and all(p.exists() and p.stat().st_size > 0 for p in job.expected))


def execute(job: Job, notebook_dir: Path = NOTEBOOK_DIR, kernel: str = "python3") -> None:
    """Execute one notebook headlessly and check it left its files behind: a notebook whose
    cells all ran but that wrote no figure is a failure, not a silent gap in figures/."""
    import papermill

    os.environ[HEADLESS_ENV] = "1"  # inherited by the kernel: the trace viewer renders static HTML
    job.output.parent.mkdir(parents=True, exist_ok=True)
    kernel_groups: list[int] = []
    try:
        # The kernel starts in notebook_dir; papermill's own `cwd=` would chdir this whole process, and
        # with two notebooks at once one thread's chdir moves every relative path of the other
        papermill.execute_notebook(str(notebook_dir.resolve() / f"{job.notebook}.ipynb"), str(job.output.resolve()),
                                   parameters=job.parameters, kernel_name=kernel, progress_bar=False,
                                   log_output=False,
                                   kernel_manager_class=recording_kernel_manager(kernel_groups, notebook_dir))
    finally:
        end_process_groups(kernel_groups)
    missing = [str(p) for p in job.expected if not p.exists() or p.stat().st_size == 0]
    if missing:
        raise RuntimeError(f"{job.label}: finished but did not write {', '.join(missing)} (see {job.output})")


def recording_kernel_manager(groups: list[int], cwd: Path | None = None) -> type[AsyncKernelManager]:
    """A kernel manager class (for papermill, which passes it to nbclient) that starts each
    kernel in `cwd` (when given) and appends the process group of each kernel it starts to
    `groups`. jupyter_client starts every kernel in a session of its own, so the group holds
    the kernel and what it started that stayed in the group (vLLM's EngineCore and workers
    do; a bwrap sandbox starts a session of its own and dies with its parent instead), and
    nothing else."""

    class Recording(AsyncKernelManager):
        # jupyter_client types start_kernel as its synchronous wrapper; AsyncKernelManager's is a coroutine
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            if cwd is not None:
                kw["cwd"] = str(Path(cwd).resolve())
            await super().start_kernel(**kw)
            pgid = getattr(self.provisioner, "pgid", None)
            if isinstance(pgid, int) and pgid > 0:
                groups.append(pgid)

    return Recording


def end_process_groups(groups: list[int]) -> None:
    """SIGKILL what is left of each group once its job is over, however it ended. A kernel
    that exits cleanly usually ends its children itself (vLLM's engine at exit), but one that
    dies (the OOM killer, a crash) runs no cleanup, and jupyter_client signals the group only
    when it kills a live kernel itself: its vLLM engine would stay, holding its KV cache and a
    core (tests/test_lifetime.py). Never this process's own group."""
    for pgid in groups:
        if pgid == os.getpgrp():
            continue
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # nothing left: the usual case


def run_jobs(jobs: list[Job], notebook_dir: Path = NOTEBOOK_DIR, kernel: str = "python3",
             log: Callable[[str], None] = print, watch_interval_s: float = 5.0,
             parallel: int = 1, records: Records | None = None) -> list[dict[str, Any]]:
    """Execute the jobs in order: a line per stage a run finishes (read from its events,
    the notebook's own output is not shown) and a line per job with the overall share of
    the work done and an ETA (whalekit.infra.progress); returns and saves the timings.
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

