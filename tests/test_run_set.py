"""A reproduction made in chunks: the plan in tiers, runs recorded under results/ skipped
when their configuration and code match, an ETA from this machine's own timings, a
deadline that stops at a run boundary, and a STATUS.md that lists every planned run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_fixtures import write_run

from whalekit.records.code_identity import RunCode, register
from whalekit.records.results import record_path
from whalekit.repro import notebook_runner, reproduce, reproduce_plan
from whalekit.repro.run_set import LEFT, OTHER_CODE, OTHER_CONFIG, RECORDED, Deadline, Records
from whalekit.run import provenance as prov

CPU = "Test CPU, AVX2, no native bf16"


def _plan(tmp_path: Path, methods=("whale", "weight_only"), **kwargs) -> list[reproduce_plan.Job]:
    return reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"], methods=list(methods),
                          grid=False, **kwargs)


def _record(job: reproduce_plan.Job, results: Path, source: str | None = None, cpu: str = CPU, wall_s: float = 100.0,
            **config_changes) -> Path:
    """A finished record of `job`'s run under `results`, made by `source` on `cpu`."""
    assert job.planned is not None
    p = job.parameters
    run = write_run(results / "made", p["method"], [0.25, 0.5], seed=p["seed"])
    block = {**prov.provenance("hf"), "cpu_kind": cpu, **({"source_sha256": source} if source else {})}
    run.write_config({**run.config(), **config_changes, "provenance": block})
    events = [json.loads(line) for line in run.events_path.read_text().splitlines()]
    events[-1]["wall_s"] = wall_s
    run.events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    folder = record_path(job.planned.config, results)
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(run.root), str(folder))
    return folder


def _copy_export(run_dir: Path, results_root: Path) -> Path:
    """Stands in for whalekit.records.results.export_run: the record is the run directory itself."""
    config = json.loads((Path(run_dir) / "config.json").read_text())
    target = Path(results_root) / config["preset"] / config["domain"] / Path(run_dir).name
    shutil.copytree(run_dir, target, dirs_exist_ok=True)
    return target


def test_the_cpu_set_comes_in_tiers_seed_by_seed_with_the_zero_start_last(tmp_path):
    jobs = reproduce_plan.plan("cpu", tmp_path / "runs", tmp_path / "figures")
    runs = [j.planned for j in jobs if j.planned is not None]
    tiers = [r.tier for r in runs]
    assert tiers == sorted(tiers) and set(tiers) == {"a", "b", "c", "d"}
    tier_a = [r.config for r in runs if r.tier == "a"]
    assert {c.method for c in tier_a} == {"whale", "weight_only", "harness_only", "fst"}
    assert [c.seed for c in tier_a] == sorted(c.seed for c in tier_a), "seed 0 complete before seed 1 starts"
    assert len(tier_a) == 4 * 3 * 3
    zero = [r for r in runs if r.tier == "d"]
    assert {r.config.method for r in zero} == {"whale", "weight_only", "harness_only"} and len(zero) == 3 * 3 * 3
    assert all(r.config.initial_harness == "h0_faithful" and r.config.run_name.endswith("-h0_faithful")
               for r in zero)
    jobs_by_run = {j.planned.key: j for j in jobs if j.planned is not None}
    assert all(jobs_by_run[r.key].parameters["overrides"] == {"initial_harness": "h0_faithful"} for r in zero)
    assert len({r.key for r in runs}) == len(runs), "no run planned twice"


def test_a_record_counts_only_for_the_same_configuration_and_code(tmp_path):
    jobs = _plan(tmp_path, seeds=[0, 1])
    planned = [j for j in jobs if j.planned is not None]
    results = tmp_path / "results"
    _record(planned[0], results, source="a" * 64)
    _record(planned[1], results, source="b" * 64)
    _record(planned[2], results, source="a" * 64, eval_k=5)
    records = Records([j.planned for j in planned], results, _copy_export, code=RunCode("a" * 64), cpu=CPU)
    states = [s.state for s in records.states]
    assert states == [RECORDED, OTHER_CODE, OTHER_CONFIG, LEFT]
    assert "eval_k" in records.states[2].reason and "bbbbbbbbbbbb" in records.states[1].reason


def test_a_record_of_other_package_source_counts_when_the_code_a_run_executes_is_unchanged(tmp_path):
    jobs = _plan(tmp_path, seeds=[0, 1])
    planned = [j for j in jobs if j.planned is not None]
    results = tmp_path / "results"
    _record(planned[0], results, source="old" + "0" * 61)
    _record(planned[1], results, source="edit" + "0" * 60)
    _record(planned[2], results, source="unknown" + "0" * 57)
    now = RunCode("new" + "0" * 61, {"whalekit/weights/rsft_loss.py": "x", "whalekit/rollouts/engine.py": "y"})
    # the old version ran the same modules (a reporting edit since); the other edited the loss
    register(results, RunCode("old" + "0" * 61, dict(now.modules)), "c0ffee")
    register(results, RunCode("edit" + "0" * 60, {**now.modules, "whalekit/weights/rsft_loss.py": "z"}), "beef")
    records = Records([j.planned for j in planned], results, _copy_export, code=now, cpu=CPU)
    assert [s.state for s in records.states[:3]] == [RECORDED, OTHER_CODE, OTHER_CODE]
    assert "whalekit/weights/rsft_loss.py (edited)" in records.states[1].reason
    assert "not in the ledger" in records.states[2].reason


def test_the_eta_comes_from_runs_timed_on_this_cpu_kind_only(tmp_path):
    jobs = [j for j in _plan(tmp_path, seeds=[0, 1, 2]) if j.planned is not None]
    results = tmp_path / "results"
    _record(jobs[0], results, source="a" * 64, wall_s=600.0)  # whale s0 on this CPU kind
    _record(jobs[1], results, source="a" * 64, wall_s=60.0, cpu="Another CPU, native bf16 (AVX512-BF16/AMX)")
    records = Records([j.planned for j in jobs], results, _copy_export, code=RunCode("a" * 64), cpu=CPU)
    summary = records.summary()
    # four runs left, all estimated from the one run timed on this CPU kind (600 s)
    assert "2 of 6 runs recorded, 4 left; ETA 40:00" in summary and CPU in summary
    elsewhere = Records([j.planned for j in jobs], results, _copy_export, code=RunCode("a" * 64), cpu="Unseen CPU")
    assert ("ETA unknown on this CPU kind (Unseen CPU): no run of this set has been timed on it; its records took "
            "1:00 to 10:00 a run on other CPU kinds") in elsewhere.summary()  # the measured range, not an estimate


def test_the_deadline_stops_at_a_run_boundary():
    now = [0.0]
    deadline = Deadline(1.0, clock=lambda: now[0])
    assert deadline.allows(None) and deadline.allows(3000.0)
    assert not deadline.allows(4000.0), "a run this machine says takes past the hour does not start"
    now[0] = 3600.0
    assert not deadline.allows(None) and not deadline.allows(1.0)
    assert Deadline(None).allows(10 ** 9)


def test_a_chunk_skips_recorded_runs_exports_finished_ones_and_stops_at_the_deadline(tmp_path, monkeypatch):
    jobs = _plan(tmp_path, seeds=[0, 1])
    planned = [j for j in jobs if j.planned is not None]
    results = tmp_path / "results"
    source = prov.source_sha256()
    _record(planned[0], results, source=source, wall_s=1000.0)
    executed: list[str] = []

    def fake_execute(job, notebook_dir, kernel):
        executed.append(job.label)
        if job.run_dir is not None:
            run = write_run(Path(job.parameters["runs_root"]), job.parameters["method"], [0.25, 0.5],
                            seed=job.parameters["seed"])
            run.write_config({**run.config(), "provenance": {**prov.provenance("hf"), "cpu_kind": CPU}})
        for path in [*job.expected, job.output]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")

    monkeypatch.setattr(notebook_runner, "execute", fake_execute)
    clock = [0.0]
    lines: list[str] = []
    # 1000 s per run on this CPU: a 0.5-hour chunk makes one run (1000 s), then none fits
    deadline = Deadline(0.5, clock=lambda: clock[0])
    records = Records([j.planned for j in planned], results, _copy_export, deadline, log=lines.append, cpu=CPU)
    original = records.finished

    def finished_later(run):
        clock[0] += 1000.0
        original(run)

    records.finished = finished_later  # type: ignore[method-assign]
    notebook_runner.run_jobs(jobs, log=lines.append, watch_interval_s=0.01, records=records)
    run_labels = [j.label for j in planned]
    assert planned[0].label not in executed, "a recorded run is not made again"
    assert executed.count(planned[1].label) == 1 and planned[2].label not in executed
    assert not any(label.split()[0] in reproduce_plan.ANALYSIS for label in executed), "analysis waits for the set"
    assert records.stopped and any("--max-hours reached" in line for line in lines)
    assert (record_path(planned[1].planned.config, results) / "config.json").exists()
    status = (results / "smoke" / "STATUS.md").read_text()
    assert "2 of 4 runs recorded, 2 left" in status
    assert all(f"| toy | {j.planned.config.run_name} |" in status for j in planned) and len(run_labels) == 4


@pytest.mark.parametrize("flag", [[], ["--no-zero-start"]])
def test_the_dry_run_prints_the_plan_with_done_left_and_eta(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)
    assert reproduce.main(["--preset", "cpu", "--domains", "math", "--seeds", "0", "--no-grid", "--dry-run",
                           *flag]) == 0
    err = capsys.readouterr().err
    # the preset's whole set per tier, whatever the selection, then the selection's own count
    assert "tier a (Table 2's core" in err and "tier d (the zero start" in err and "0 of 102 runs" in err
    assert "ETA" in err
    selected = 4 + 3 + (0 if flag else 3)  # math, seed 0: tier a, tier b and (unless left out) tier d
    assert f"this chunk's selection: 0 of {selected} runs recorded, {selected} left" in err


def test_a_chunk_of_a_few_runs_still_lists_every_planned_run_in_status(tmp_path):
    jobs = [j for j in _plan(tmp_path, seeds=[0, 1]) if j.planned is not None]
    results = tmp_path / "results"
    records = Records([j.planned for j in jobs], results, _copy_export, code=RunCode("a" * 64), cpu=CPU,
                      selected=[jobs[0].planned])
    records.write_status()
    status = (results / "smoke" / "STATUS.md").read_text()
    assert "0 of 4 runs recorded, 4 left" in status
    assert all(f"| toy | {j.planned.config.run_name} |" in status for j in jobs)
    assert "this chunk's selection: 0 of 1 runs recorded, 1 left" in records.summary()
