"""Where `make reproduce` writes: the smoke pass under runs/smoke/ and figures/smoke/, never
over the committed figures, which belong to the cpu preset."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from whalekit.records import results
from whalekit.repro import reproduce, reproduce_plan

ROOT = Path(__file__).resolve().parents[1]


def _written(jobs: list[reproduce_plan.Job]) -> list[Path]:
    return [p for job in jobs for p in job.expected] + [job.output for job in jobs]


def test_smoke_writes_under_runs_smoke_and_figures_smoke(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `make reproduce` runs from the checkout: relative defaults resolve there
    jobs = reproduce_plan.plan("smoke", domains=["toy"])
    figures, runs = (tmp_path / "figures" / "smoke").resolve(), (tmp_path / "runs" / "smoke").resolve()
    assert {job.parameters["figures"] for job in jobs} == {str(figures)}
    assert all(p.is_relative_to(figures) for job in jobs for p in job.expected)
    assert all(job.output.is_relative_to(runs) for job in jobs)
    assert all(job.run_dir.is_relative_to(runs) for job in jobs if job.run_dir)


def test_the_cpu_preset_writes_the_committed_figures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = reproduce_plan.plan("cpu", domains=["chess"], methods=["whale"], grid=False)
    assert {job.parameters["figures"] for job in jobs} == {str((tmp_path / "figures").resolve())}
    assert (tmp_path / "figures" / "fig2_best_so_far.png").resolve() in _written(jobs)


def test_no_smoke_output_lands_on_a_committed_figure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    committed = subprocess.run(["git", "ls-files", "figures"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert committed, "the checkout commits figures"
    smoke = {str(p.relative_to(tmp_path.resolve())) for p in _written(reproduce_plan.plan("smoke"))}
    cpu = {str(p.relative_to(tmp_path.resolve())) for p in _written(reproduce_plan.plan("cpu", grid=False))}
    assert not smoke & set(committed)
    assert cpu & set(committed)  # the check would see an overlap if there were one


def test_the_command_line_default_follows_the_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert reproduce.main(["--preset", "smoke", "--domains", "toy", "--dry-run"]) == 0
    parameters = [json.loads(line[line.index("{"):]) for line in capsys.readouterr().out.splitlines()]
    assert {p["figures"] for p in parameters} == {str((tmp_path / "figures" / "smoke").resolve())}
    assert results.figures_dir("smoke") == Path("figures/smoke")
    assert results.figures_dir("cpu") == Path("figures")
    assert results.figures_dir("/some/where/mine.yaml", "out") == Path("out/mine")


def test_the_analysis_notebooks_read_the_records_where_the_reproduction_exports_them(tmp_path):
    jobs = reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"],
                               results=tmp_path / "elsewhere")
    analysis = [job for job in jobs if job.notebook in reproduce_plan.ANALYSIS]
    assert analysis and all(job.parameters["results_root"] == str((tmp_path / "elsewhere").resolve())
                            for job in analysis)
    assert all("results_root" not in job.parameters for job in jobs if job.notebook not in reproduce_plan.ANALYSIS)
