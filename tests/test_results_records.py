"""Committed records (whalekit.records.results): a finished run exports a small thin run
directory from which the tables, figures and viewer give what the run directory gives;
unfinished runs are refused, and figures refuse records made by different code."""

from __future__ import annotations

import json
import shutil

import matplotlib.pyplot as plt
import pytest
from run_fixtures import write_run

from whalekit.infra.runs import RunDir
from whalekit.records import results
from whalekit.records.code_identity import RunCode
from whalekit.records.results import MixedRecordsError, UnfinishedRunError, export_run
from whalekit.report import behaviour_plots, figures, plots, run_summaries, tables, viewer
from whalekit.repro import reproduce_plan
from whalekit.search.archive import Archive, archive_holding

# A cpu run: 7 test evaluations of 64 problems x 8 samples. Its record must stay small enough to
# commit a whole reproduction (about a hundred runs): per-sample rows, no token ids or checkpoints.
CPU_EVALUATIONS, CPU_SAMPLES = 7, 512
CPU_RECORD_BOUND = 1_000_000  # bytes on disk (git stores them compressed, about a tenth)
SMOKE_RECORD_BOUND = 200_000


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Real smoke runs (tiny random model, the driver itself): WHALE and weights-only on
    toy at two seeds, and their records."""
    from whalekit.run.driver import resolve_config, run_method
    from whalekit.samplers.models import load_policy

    root = tmp_path_factory.mktemp("smoke")
    policy = load_policy("tiny-random")
    runs = [run_method(resolve_config("smoke", domain="toy", method=method, seed=seed, runs_root=str(root / "runs")),
                       policy=policy) for method in ("whale", "weight_only") for seed in (0, 1)]
    records = [export_run(run.root, root / "results") for run in runs]
    return root, runs, records


def _frames(root):
    return [tables.main_comparison(root, "smoke"), tables.main_comparison(root, "smoke", by_subset=True),
            tables.points_table(root, "smoke"), tables.paired_comparison(root, "smoke")]


def test_a_record_gives_the_tables_of_its_run_directory(smoke):
    root, _, _ = smoke
    for from_runs, from_records in zip(_frames(root / "runs"), _frames(root / "results")):
        assert from_runs.equals(from_records) and from_runs.attrs == from_records.attrs
    assert "WHALE" in set(_frames(root / "results")[0]["method"])


def test_a_record_gives_the_figures_inputs_of_its_run_directory(smoke):
    root, runs, records = smoke
    for run, record in zip(runs, records):
        a, b = run_summaries.load_run(run.root), run_summaries.load_run(record)
        assert a.evals == b.evals and a.selection_signals() == b.selection_signals()
        assert [a.problem_scores(e) for e in a.evals] == [b.problem_scores(e) for e in b.evals]
        assert behaviour_plots.behaviour_units([a]) == behaviour_plots.behaviour_units([b])
        assert plots.adaptive_cycles(a) == plots.adaptive_cycles(b)
    whale_run, whale_record = runs[0].root, records[0]
    accepted = RunDir(whale_run).events("run_end")[-1]["accepted_id"]
    for folder in (whale_run, whale_record):
        archive = archive_holding(folder / "archive", "toy", accepted)
        assert archive is not None
    original, kept = (archive_holding(f / "archive", "toy", accepted) for f in (whale_run, whale_record))
    assert [(e.id, e.parent_ids, e.scores) for e in original.entries()] == \
        [(e.id, e.parent_ids, e.scores) for e in kept.entries()]
    assert kept.source(accepted) == original.source(accepted)
    assert kept.diff(accepted, kept.seed_id()) == original.diff(accepted, original.seed_id())


def test_a_record_has_no_checkpoints_and_stays_small(smoke):
    _, runs, records = smoke
    assert any((run.root / "checkpoints").exists() for run in runs)  # what there is to leave out
    for record in records:
        assert not (record / "checkpoints").exists() and not list(record.rglob("*.safetensors"))
        assert results.record_size(record) < SMOKE_RECORD_BOUND
        assert results.is_record(record) and RunDir(record).done
        rows = [json.loads(line) for line in (record / "test" / "eval-000.jsonl").read_text().splitlines()]
        assert rows and all(set(row) <= {*results.TEST_FIELDS, "flags"} for row in rows)


def test_a_cpu_sized_record_stays_under_its_bound(tmp_path):
    """7 evaluations x 512 samples (256 problems x k=2 in the fixture) with the fixture's flags."""
    run = write_run(tmp_path / "runs", "whale", [0.5] * CPU_EVALUATIONS, problems=CPU_SAMPLES // 2)
    record = export_run(run.root, tmp_path / "results")
    assert results.record_size(record) < CPU_RECORD_BOUND
    assert sum(1 for _ in (record / "test").glob("eval-*.jsonl")) == CPU_EVALUATIONS


def test_the_record_keeps_whole_example_trajectories_for_the_viewer(smoke):
    _, runs, records = smoke
    sources = viewer.run_sources(records[0])
    final = f"eval-{RunDir(runs[0].root).events('test_eval')[-1]['index']:03d}"
    assert list(sources)[0] == f"{viewer.TEST_PREFIX}{final}"
    examples = sources[f"{viewer.TEST_PREFIX}{final}"]
    assert 0 < len(examples) <= results.EXAMPLES and all(t.turns and t.messages for t in examples)
    assert all(turn.completion_ids and not turn.prompt_ids for t in examples for turn in t.turns)
    assert all(trajectories for trajectories in sources.values())  # no empty archive sources


def test_the_accepted_lineage_keeps_its_source_and_other_candidates_a_stub(tmp_path):
    run = write_run(tmp_path / "runs", "whale", [0.25, 0.5])
    record = export_run(run.root, tmp_path / "results")
    archive = Archive.open(record / "archive", "toy")
    accepted = RunDir(record).events("run_end")[-1]["accepted_id"]
    stubbed = [e.id for e in archive.entries() if archive.source(e.id) == results.STUB_SOURCE]
    assert len(archive) == 3 and len(stubbed) == 1 and accepted not in stubbed
    assert json.loads((record / "record.json").read_text())["harness_sources"] == sorted(
        {accepted, archive.seed_id()})


def test_an_unfinished_run_is_refused(tmp_path):
    run = write_run(tmp_path / "runs", "whale", [0.25, 0.5])
    run.commit({"finished": False})
    with pytest.raises(UnfinishedRunError, match="has not finished"):
        export_run(run.root, tmp_path / "results")
    assert not (tmp_path / "results" / "smoke" / "toy" / run.root.name).exists()


def test_exporting_again_replaces_the_record_whole(tmp_path):
    run = write_run(tmp_path / "runs", "whale", [0.25, 0.5])
    first = export_run(run.root, tmp_path / "results")
    (first / "stray.txt").write_text("left from an older export")
    before = {p.relative_to(first): p.read_bytes() for p in first.rglob("*") if p.is_file() and p.name != "stray.txt"}
    again = export_run(run.root, tmp_path / "results")
    assert again == first and not (again / "stray.txt").exists()
    assert {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in again.parent.iterdir()) == [run.root.name]
    assert list((tmp_path / "results" / results.STAGING).iterdir()) == []  # nothing half-written left


def test_a_record_is_found_read_back_and_compared_with_a_configuration(tmp_path):
    from whalekit.run.driver import resolve_config

    run = write_run(tmp_path / "runs", "whale", [0.25, 0.5])
    config = resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path / "runs"))
    assert results.record_path(config, tmp_path / "results") == tmp_path / "results" / "smoke" / "toy" / run.root.name
    assert results.find_record(tmp_path / "results", "smoke", "toy", run.root.name) is None
    record_dir = export_run(run.root, tmp_path / "results")
    assert results.find_record(tmp_path / "results", "smoke", "toy", run.root.name) == record_dir
    record = results.read_record(record_dir)
    assert "provenance" not in record.config and record.provenance["cpu_kind"]
    code = RunCode(str(record.provenance.get("source_sha256")))
    # another runs_root is the same run; another budget, or other code, is not
    assert results.record_changes(record, {**config.to_json(), "runs_root": "/elsewhere"}, code) == []
    changed = resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path), budget=128)
    assert any(c.startswith("budget.rollouts") for c in results.record_changes(record, changed.to_json(), code))
    assert any("package source" in c for c in results.record_changes(record, config.to_json(), RunCode("other")))


def _set_provenance(folder, **block):
    config = json.loads((folder / "config.json").read_text())
    config["provenance"] = {**config.get("provenance", {}), **block}
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def records(tmp_path):
    """Records of a small main comparison and an adaptive run, all made by one code version."""
    runs = [write_run(tmp_path / "runs", "whale", [0.25, 0.75, 0.5], problems=4),
            write_run(tmp_path / "runs", "whale", [0.5, 0.25, 1.0], seed=1, problems=4),
            write_run(tmp_path / "runs", "weight_only", [0.25, 0.5, 0.5], problems=4),
            write_run(tmp_path / "runs", "adaptive", [0.25, 0.25, 0.5, 0.5, 0.75], problems=4),
            write_run(tmp_path / "runs", "whale", [0.0, 1.0], schedule="1.0,2", problems=4)]
    folders = [export_run(run.root, tmp_path / "results") for run in runs]
    for folder in folders:
        _set_provenance(folder, source_sha256="a" * 64, git_commit="c" * 40)
    return tmp_path / "results", folders


def test_records_made_by_other_code_are_refused_naming_them(records):
    root, folders = records
    _set_provenance(folders[2], source_sha256="b" * 64)
    with pytest.raises(MixedRecordsError) as raised:
        tables.main_comparison(root, "smoke")
    message = str(raised.value)
    assert str(folders[2]) in message and str(folders[0]) not in message
    assert "4 share source aaaaaaaaaaaa" in message and "Re-make" in message
    with pytest.raises(MixedRecordsError):
        figures.write_figures(root, "smoke", root.parent / "figures")
    assert not (root.parent / "figures").exists()  # refused before anything is drawn


def test_the_same_source_at_another_commit_is_refused_and_an_unknown_commit_is_not(records):
    root, folders = records
    _set_provenance(folders[1], git_commit="unknown")
    assert len(run_summaries.find_runs(root, "smoke")) == len(folders)
    _set_provenance(folders[3], git_commit="d" * 40)
    with pytest.raises(MixedRecordsError, match="adaptive-s0: source aaaaaaaaaaaa, commit dddddddddd"):
        run_summaries.find_runs(root, "smoke")


def test_figures_read_records_first_and_fall_back_to_runs_saying_so(records, tmp_path):
    root, _ = records
    said: list[str] = []
    assert results.choose_root(root, tmp_path / "runs", "smoke", log=said.append) == root
    assert results.choose_root(root, tmp_path / "runs", "cpu", log=said.append) == tmp_path / "runs"
    assert results.choose_root(None, tmp_path / "runs", "smoke", log=said.append) == tmp_path / "runs"
    assert said == [f"reading the committed records under {root / 'smoke'} (results_root = None reads "
                    f"{tmp_path / 'runs' / 'smoke'} instead)",
                    f"no records under {root / 'cpu'}: reading the run directories under {tmp_path / 'runs' / 'cpu'}",
                    f"reading your run directories under {tmp_path / 'runs' / 'smoke'} (results_root is None)"]


def test_the_figures_entry_point_writes_every_notebook_output_with_the_same_bytes_twice(records, tmp_path):
    root, _ = records
    outputs = []
    for name in ("a", "b"):
        assert figures.main(["--preset", "smoke", "--results", str(root), "--out", str(tmp_path / name)]) == 0
        outputs.append({p.relative_to(tmp_path / name): p.read_bytes() for p in (tmp_path / name).rglob("*")})
    assert outputs[0] == outputs[1]
    pdfs = [data for path, data in outputs[0].items() if path.suffix == ".pdf"]
    assert pdfs and not any(b"CreationDate" in data for data in pdfs)  # the same bytes in any second, too
    expected = {p.relative_to(tmp_path / "a") for notebook in reproduce_plan.ANALYSIS
                for p in reproduce_plan.expected_outputs(notebook, tmp_path / "a", ["toy"], grid_domain="toy")}
    assert expected <= set(outputs[0])
    assert {"table2_paired.md", "fig2_test_accuracy.png", "provenance.md"} <= {p.name for p in outputs[0]}
    note = outputs[0][next(p for p in outputs[0] if p.name == "provenance.md")].decode()
    assert "source_sha256 `" + "a" * 64 in note and "CPU kinds:" in note


def test_the_figures_of_records_equal_those_of_their_run_directories(records, tmp_path):
    root, _ = records
    shutil.rmtree(tmp_path / "runs" / "smoke" / "toy" / "whale-1,2-s0")  # the runs, less one run
    shutil.rmtree(root / "smoke" / "toy" / "whale-1,2-s0")
    for folder in (root / "smoke" / "toy").iterdir():  # the records' provenance, as the runs have it (none)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "provenance": {}}))
    a = figures.write_figures(tmp_path / "runs", "smoke", tmp_path / "from-runs")
    b = figures.write_figures(root, "smoke", tmp_path / "from-records")
    assert [p.name for p in a] == [p.name for p in b]
    differ = [p.name for p, q in zip(a, b) if p.read_bytes() != q.read_bytes() and p.name != "provenance.md"]
    assert differ == []


def test_a_record_of_a_clean_commit_is_registered_from_git_when_the_checkout_changed_since(tmp_path, monkeypatch):
    from whalekit.records import code_identity

    made = code_identity.RunCode("f" * 64, {"whalekit/run/driver.py": "a"})
    monkeypatch.setattr(code_identity.RunCode, "at_commit", classmethod(lambda cls, commit, repo=None: made))
    monkeypatch.setattr(results.RunCode, "at_commit", classmethod(lambda cls, commit, repo=None: made))
    results._register_code({"source_sha256": "f" * 64, "git_commit": "abc1234", "git_dirty": False}, tmp_path)
    assert "f" * 64 in code_identity.ledger_entries(tmp_path)
    for block in ({"source_sha256": "e" * 64, "git_commit": "abc1234", "git_dirty": False},  # not that commit's code
                  {"source_sha256": "d" * 64, "git_commit": "abc1234", "git_dirty": True}):  # uncommitted edits ran
        results._register_code(block, tmp_path)
        assert block["source_sha256"] not in code_identity.ledger_entries(tmp_path)
