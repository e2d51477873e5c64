"""The notebooks: stored without outputs, each with a papermill `parameters` cell, thin;
and the whole sequence executes headlessly under the smoke preset, leaving every
expected figure and table non-empty on disk."""

from __future__ import annotations

import json

import nbformat
import pytest

from whalekit.repro import notebook_runner, reproduce_plan
from whalekit.repro.reproduce_plan import ANALYSIS, DOMAIN_RUN, NOTEBOOK_DIR, NOTEBOOKS, QUICKSTART, TUTORIALS

NOTEBOOK_FILES = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def test_the_notebook_list_is_exactly_the_sequence_reproduce_runs_plus_the_tutorials():
    assert [p.stem for p in NOTEBOOK_FILES] == sorted(NOTEBOOKS + TUTORIALS)


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.stem)
def test_notebooks_in_git_carry_no_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for number, cell in enumerate(notebook.cells, 1):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {number} has stored outputs"
            assert cell.execution_count is None, f"{path.name}: cell {number} has an execution count"
    assert "papermill" not in notebook.metadata, f"{path.name}: an executed copy was committed"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.stem)
def test_each_notebook_has_one_parameters_cell_of_literals_and_stays_thin(path):
    notebook = nbformat.read(path, as_version=4)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    for line in tagged[0].source.splitlines():
        name, _, value = line.partition("=")
        assert name.strip().isidentifier() and value.strip(), f"{path.name}: parameters line {line!r}"
    assert {"preset", "runs_root", "figures"} <= {line.split("=")[0].strip() for line in tagged[0].source.splitlines()}
    assert notebook.cells[0].cell_type == "markdown" and "Expected runtime" in notebook.cells[0].source
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert not any(line.startswith(("def ", "class ")) for source in code for line in source.splitlines()), \
        f"{path.name}: helpers belong in whalekit/, not in the notebook"


def test_plan_runs_each_domain_method_once_then_the_analysis(tmp_path):
    jobs = reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"])
    labels = [j.label for j in jobs]
    assert labels[0] == QUICKSTART and labels[-len(ANALYSIS):] == list(ANALYSIS)
    runs = [j for j in jobs if j.notebook == DOMAIN_RUN]
    # seven methods on toy, plus the grid's (1, 1) schedule; the grid's (0.5, 1) is the main WHALE run
    assert len(runs) == 8 and len({j.run_dir for j in runs}) == 8
    assert {j.run_dir.name for j in runs} >= {"whale-0.5,2-s0", "whale-1,2-s0", "adaptive-s0"}
    assert all(j.output.parent == (tmp_path / "runs" / "smoke" / "notebooks").resolve() for j in jobs)


def test_plan_without_the_grid_or_adaptive_leaves_out_their_runs_and_notebooks(tmp_path):
    jobs = reproduce_plan.plan("smoke", tmp_path / "runs", tmp_path / "figures", domains=["toy"],
                          methods=["whale", "weight_only"], grid=False)
    analysis = [n for n in ANALYSIS if n not in ("05_schedule_grid", "06_adaptive")]
    assert [j.label.split()[0] for j in jobs] == [QUICKSTART, DOMAIN_RUN, DOMAIN_RUN, *analysis]
    assert {j.run_dir.name for j in jobs if j.run_dir} == {"whale-0.5,2-s0", "weight_only-s0"}


def test_timings_note_lists_every_notebook(tmp_path):
    timings = [{"notebook": "01_quickstart", "label": "01_quickstart", "wall_s": 3.2, "reused": False},
               {"notebook": DOMAIN_RUN, "label": "02_domain_run toy/whale-0.5,2-s0", "wall_s": 0.0, "reused": True}]
    text = notebook_runner.write_timings(timings, tmp_path).read_text()
    assert "| 01_quickstart | 3.2 |" in text and "| 02_domain_run toy/whale-0.5,2-s0 | reused |" in text
    assert json.loads((tmp_path / "timings.json").read_text()) == timings


@pytest.mark.timeout(1200)  # about 15 s with the tiny model: part of `make test-fast`
def test_the_custom_domain_notebook_builds_a_domain_outside_whalekit_and_runs_whale_on_it(tmp_path):
    from whalekit.infra.runs import RunDir
    from whalekit.search.archive import Archive, archive_folders

    figures = tmp_path / "figures"
    parameters = {"preset": "smoke", "model": "tiny-random", "runs_root": str(tmp_path / "runs"),
                  "figures": str(figures), "budget": 48, "n_train": 8, "n_search": 8, "n_test": 4}
    job = reproduce_plan.Job(TUTORIALS[0], parameters, tmp_path / "executed" / f"{TUTORIALS[0]}.ipynb",
                        [figures / "08_units_whale.png", figures / "08_units_whale.pdf"])
    notebook_runner.execute(job)  # raises on a failing cell or a missing figure
    run = RunDir(tmp_path / "runs" / "units_smoke" / "units" / "whale-0.5,2-s0")
    assert run.done and run.config()["model"] == "tiny-random"
    assert {e["kind"] for e in run.events("stage_end") if e["steps"]} == {"weight", "harness"}
    proposals = [e for folder in archive_folders(run.root / "archive") for e in Archive.open(folder, "units").entries()
                 if e.parent_ids]
    assert proposals, "the harness phase proposed nothing from the notebook's mechanisms"
    executed = nbformat.read(job.output, as_version=4)
    assert not [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
