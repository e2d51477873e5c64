"""`make reproduce`: three seeds by default, overall progress with an ETA and a line per
finished stage while it works, and finished runs made by other code or another sampler
reported and made again unless --reuse-foreign-runs keeps them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from run_fixtures import write_run

from whalekit.infra.runs import RunDir
from whalekit.presets import load_preset
from whalekit.repro import notebook_runner, reproduce, reproduce_plan
from whalekit.run import provenance as prov


def _plan(tmp_path: Path, methods=("whale", "weight_only")) -> list[reproduce_plan.Job]:
    return reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"], methods=list(methods),
                          grid=False)


def _run_for(job: reproduce_plan.Job, block: dict | None) -> RunDir:
    """A finished run where `job` expects it, with `block` as its provenance (None: none recorded)."""
    p = job.parameters
    run = write_run(Path(p["runs_root"]), p["method"], [0.25, 0.5, 0.75], seed=p["seed"])
    assert run.root == job.run_dir
    if block is not None:
        run.write_config({**run.config(), "provenance": block})
    return run


def test_the_command_line_runs_three_seeds_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert reproduce.main(["--preset", "smoke", "--domains", "toy", "--methods", "whale", "--no-grid",
                           "--seeds", "0", "1", "2", "--dry-run"]) == 0
    parameters = [json.loads(line[line.index("{"):]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(p["seed"] for p in parameters if "seed" in p) == [0, 1, 2]
    assert reproduce_plan.run_set_defaults(load_preset("cpu"))["seeds"] == [0, 1, 2]
    assert reproduce_plan.run_set_defaults(load_preset("paper"))["seeds"] == [0, 1, 2]


def test_the_smoke_preset_reproduces_every_method_once_on_one_domain(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert reproduce.main(["--preset", "smoke", "--dry-run"]) == 0
    runs = [json.loads(line[line.index("{"):]) for line in capsys.readouterr().out.splitlines()
            if line.startswith(reproduce_plan.DOMAIN_RUN)]
    main = [(p["domain"], p["method"], p["seed"]) for p in runs if p["domain"] != "toy"]
    assert sorted(main) == sorted(("math", m, 0) for m in reproduce_plan.METHODS)
    assert {p["domain"] for p in runs} == {"math", "toy"}  # toy: the schedule grid
    assert all(p["figures"].endswith("figures/smoke") for p in runs)  # never over the committed figures
    assert reproduce_plan.run_set_defaults(load_preset("smoke"))["parallel"] == 2
    assert reproduce_plan.run_set_defaults(load_preset("cpu"))["parallel"] == 1  # SmolLM2's matmuls fill the cores


def test_a_preset_reproduce_section_with_unknown_keys_or_domains_is_refused():
    data = load_preset("smoke")
    with pytest.raises(ValueError, match="unknown keys"):
        reproduce_plan.run_set_defaults({**data, "reproduce": {"seed": [0]}})
    with pytest.raises(ValueError, match="no section"):
        reproduce_plan.run_set_defaults({**data, "reproduce": {"domains": ["go"]}})


def test_foreign_runs_are_reported_and_made_again_unless_the_flag_keeps_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(prov.REUSE_ENV, "0")  # restored after the test whatever main sets
    jobs = _plan(tmp_path)
    whale, weight_only = [job for job in jobs if job.run_dir is not None]
    current = prov.provenance("hf")
    _run_for(whale, current)  # same code, same sampler
    _run_for(weight_only, {**current, "sampler": "vllm"})
    executed: list[list[reproduce_plan.Job]] = []
    monkeypatch.setattr(reproduce, "run_jobs", lambda jobs, **kwargs: executed.append(jobs) or [])
    argv = ["--preset", "smoke", "--runs-root", "runs", "--figures", "figures", "--domains", "toy", "--methods",
            "whale", "weight_only", "--no-grid", "--seeds", "0"]

    assert reproduce.main([*argv, "--reuse-foreign-runs"]) == 0
    out = capsys.readouterr().out
    assert "weight_only-s0: made by other code or another sampler (sampler: 'vllm' -> 'hf'); reused" in out
    assert "whale-" not in out.split("done in")[0]  # the run of the current code is not reported
    assert RunDir(weight_only.run_dir).done and os.environ[prov.REUSE_ENV] == "1"

    monkeypatch.setenv(prov.REUSE_ENV, "0")
    assert reproduce.main(argv) == 0
    out = capsys.readouterr().out
    assert "weight_only-s0: made by other code or another sampler (sampler: 'vllm' -> 'hf'); re-made" in out
    assert not weight_only.run_dir.exists() and RunDir(whale.run_dir).done  # re-made; the current one kept
    moved = list((tmp_path / "runs" / "foreign-runs" / "smoke" / "toy").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith("weight_only-s0-") and RunDir(moved[0]).done
    assert not notebook_runner.reusable(weight_only) and os.environ[prov.REUSE_ENV] == "0"
    assert len(executed) == 2


def test_a_run_without_provenance_or_of_other_code_is_foreign(tmp_path):
    jobs = _plan(tmp_path)
    whale, weight_only = [job for job in jobs if job.run_dir is not None]
    _run_for(whale, None)
    _run_for(weight_only, {**prov.provenance("hf"), "source_sha256": "0" * 64})
    found = dict((job.label, changes) for job, changes in reproduce.foreign_runs(jobs))
    assert found[whale.label] == ["provenance: not recorded (the run predates it)"]
    assert found[weight_only.label][0].startswith("source_sha256: '0000")
    lines: list[str] = []
    reproduce.handle_foreign_runs(jobs, log=lines.append, dry_run=True)  # --dry-run: reported, nothing moved
    assert len(lines) == 2 and all("would be re-made" in line for line in lines)
    assert RunDir(whale.run_dir).done and RunDir(weight_only.run_dir).done


def test_run_jobs_prints_stage_lines_and_overall_progress_with_an_eta(tmp_path, monkeypatch):
    jobs = _plan(tmp_path)

    def fake_execute(job, notebook_dir, kernel):  # what the notebook would leave behind, without a kernel
        if job.run_dir is not None:
            _run_for(job, prov.provenance("hf"))
        for path in [*job.expected, job.output]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")

    monkeypatch.setattr(notebook_runner, "execute", fake_execute)
    lines: list[str] = []
    notebook_runner.run_jobs(jobs, log=lines.append, watch_interval_s=0.01)
    overall = [line for line in lines if line.startswith("[")]
    assert [line.split("]")[0] for line in overall] == [f"[{i}/{len(jobs)}" for i in range(1, len(jobs) + 1)]
    assert all(" · elapsed " in line and " · ETA " in line for line in overall)
    assert overall[-1].endswith("ETA 0:00") and "100 % of the work" in overall[-1]
    run_jobs = [job for job in jobs if job.run_dir is not None]
    for job in run_jobs:  # write_run's two stages, reported under the job's label
        stage_lines = [line for line in lines if line.startswith(f"  {job.label}: ")]
        assert [line.split(": ", 1)[1].split(" · ")[0] for line in stage_lines] == ["weight stage 0",
                                                                                     "harness stage 1"]
    again: list[str] = []
    notebook_runner.run_jobs(jobs, log=again.append, watch_interval_s=0.01)
    assert sum("reused (run finished)" in line for line in again) == len(run_jobs)
    assert not any(line.startswith("  ") for line in again)  # a reused run is not watched


def test_parallel_runs_overlap_but_the_quickstart_comes_first_and_the_analysis_last(tmp_path, monkeypatch):
    import threading
    import time

    jobs = _plan(tmp_path, methods=("whale", "weight_only", "harness_only"))
    running, events, lock = set(), [], threading.Lock()

    def fake_execute(job, notebook_dir, kernel):
        with lock:
            running.add(job.label)
            events.append(("start", job.notebook, len(running)))
        time.sleep(0.3)
        if job.run_dir is not None:
            _run_for(job, prov.provenance("hf"))
        for path in [*job.expected, job.output]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        with lock:
            running.discard(job.label)
            events.append(("end", job.notebook, len(running)))

    monkeypatch.setattr(notebook_runner, "execute", fake_execute)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen_threads = []
    monkeypatch.setattr(notebook_runner, "reusable", lambda job: seen_threads.append(os.environ.get("OMP_NUM_THREADS")))
    lines: list[str] = []
    timings = notebook_runner.run_jobs(jobs, log=lines.append, watch_interval_s=0.01, parallel=2)
    # each kernel gets its share of the cores while runs overlap; the environment is restored after
    assert set(seen_threads) == {str(max(1, (os.cpu_count() or 1) // 2))} and "OMP_NUM_THREADS" not in os.environ
    starts = [(notebook, n) for kind, notebook, n in events if kind == "start"]
    assert starts[0] == (reproduce_plan.QUICKSTART, 1)
    assert max(n for notebook, n in starts if notebook == reproduce_plan.DOMAIN_RUN) == 2  # two runs at once
    assert all(n == 1 for notebook, n in starts if notebook != reproduce_plan.DOMAIN_RUN)  # the rest alone
    last_run_end = max(i for i, (kind, notebook, _) in enumerate(events)
                       if kind == "end" and notebook == reproduce_plan.DOMAIN_RUN)
    first_analysis = min(i for i, (kind, notebook, _) in enumerate(events)
                         if kind == "start" and notebook in reproduce_plan.ANALYSIS)
    assert first_analysis > last_run_end
    assert [t["label"] for t in timings] == [j.label for j in jobs]  # in plan order, whatever finished first
    assert sum(line.startswith("[") for line in lines) == len(jobs)
    with pytest.raises(ValueError):
        notebook_runner.run_jobs(jobs, parallel=0)


def test_a_failed_parallel_run_stops_the_runs_not_yet_started(tmp_path, monkeypatch):
    import threading
    import time

    jobs = _plan(tmp_path, methods=("whale", "weight_only", "harness_only", "stagewise"))
    started, failed = [], threading.Event()
    runs = [j.label for j in jobs if j.notebook == reproduce_plan.DOMAIN_RUN]

    def fake_execute(job, notebook_dir, kernel):
        started.append(job.label)
        if job.label == runs[0]:
            failed.set()
            raise RuntimeError("the notebook failed")
        if job.label == runs[1]:  # still running when the failure is seen: no slot frees for a third run
            failed.wait(5)
            time.sleep(0.5)
        for path in [*job.expected, job.output]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")

    monkeypatch.setattr(notebook_runner, "execute", fake_execute)
    with pytest.raises(RuntimeError, match="the notebook failed"):
        notebook_runner.run_jobs(jobs, log=lambda line: None, watch_interval_s=0.01, parallel=2)
    assert len(runs) == 4 and set(started) & set(runs) == set(runs[:2])  # the two running ones, no more
    assert not any(label in reproduce_plan.ANALYSIS for label in started)


@pytest.mark.parametrize("reuse", [False, True])
def test_a_run_of_the_current_code_is_never_reported(tmp_path, reuse):
    jobs = _plan(tmp_path, methods=["whale"])
    [job] = [j for j in jobs if j.run_dir is not None]
    _run_for(job, prov.provenance("hf"))
    lines: list[str] = []
    assert reproduce.handle_foreign_runs(jobs, reuse=reuse, log=lines.append) == [] and lines == []
