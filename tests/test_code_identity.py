"""A record is re-made only when code that a run executes changes (whalekit.records.code_identity):
reporting and reproduction lie outside a run's import closure, so editing them keeps every
record valid, while editing the loss, the engine or a domain does not."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from whalekit.records.code_identity import RunCode, ledger_entries, run_closure
from whalekit.run.provenance import PACKAGE_DIR, source_sha256

ROOT = PACKAGE_DIR.parent
ABOVE_A_RUN = ("records", "report", "repro", "cli")  # every module in these folders
COMPUTING = ("run/driver", "weights/rsft", "weights/rsft_loss", "rollouts/engine", "episode", "search/stage",
             "run/evaluation", "samplers/vllm", "domains/chess/verifier", "search/proposers/reflective",
             "harness_worker", "sandbox/bwrap")


def _closure() -> list[str]:
    files = [p.relative_to(ROOT).as_posix() for p in PACKAGE_DIR.rglob("*.py")]
    return run_closure(files, lambda path: (ROOT / path).read_bytes())


def test_a_run_executes_the_driver_and_its_parts_but_no_reporting_or_reproduction_code():
    closure = set(_closure())
    missing = [m for m in COMPUTING if f"whalekit/{m}.py" not in closure]
    assert not missing, f"modules a run executes are outside its closure: {missing}"
    above = [p.relative_to(ROOT).as_posix() for folder in ABOVE_A_RUN for p in (PACKAGE_DIR / folder).rglob("*.py")]
    assert len(above) > 25
    reached = [m for m in above if m in closure]
    assert not reached, f"a run imports reporting code, so editing it would re-make every record: {reached}"


def test_the_source_hash_is_the_one_every_record_carries():
    assert RunCode.of_package().source_sha256 == source_sha256()


@pytest.fixture()
def package_copy(tmp_path):
    shutil.copytree(PACKAGE_DIR, tmp_path / "whalekit", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "whalekit"


@pytest.mark.parametrize("edited", ["report/verdicts.py", "report/plots.py", "report/stats.py", "repro/run_set.py"])
def test_an_edit_to_reporting_code_leaves_every_record_valid(package_copy, edited):
    assert (package_copy / edited).exists()
    made_by = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules}}
    with (package_copy / edited).open("a") as file:
        file.write("\n# an analysis edit\n")
    now = RunCode.of_package(package_copy)
    assert now.source_sha256 != made_by.source_sha256
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []


@pytest.mark.parametrize("edited", ["weights/rsft_loss.py", "rollouts/engine.py", "domains/math/verifier.py"])
def test_an_edit_to_code_a_run_executes_makes_the_record_other_code(package_copy, edited):
    made_by = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules}}
    with (package_copy / edited).open("a") as file:
        file.write("\nEDITED = True\n")
    changes = RunCode.of_package(package_copy).changes_since({"source_sha256": made_by.source_sha256}, ledger)
    assert len(changes) == 1 and f"whalekit/{edited} (edited)" in changes[0]


def test_a_version_outside_the_ledger_is_compared_by_its_whole_source():
    changes = RunCode("a" * 64).changes_since({"source_sha256": "b" * 64}, {})
    assert changes and "not in the ledger" in changes[0]


def test_the_ledger_holds_the_committed_records_code_as_git_has_it():
    ledger = ledger_entries(ROOT / "results")
    versions = {json.loads(p.read_text())["provenance"]["source_sha256"]
                for p in (ROOT / "results").glob("*/*/*/config.json")}
    assert versions and versions <= set(ledger), "every records' code version is in results/run_code.json"
    for version in versions:
        commit = ledger[version]["commit"]
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        if known.returncode != 0:
            pytest.skip(f"commit {commit} is not in this clone's history (a shallow clone): cannot re-derive it")
        again = RunCode.at_commit(commit, ROOT)
        assert again.source_sha256 == version and again.modules == ledger[version]["modules"]


def test_code_proven_to_give_the_same_events_keeps_the_old_records_valid_while_it_stays_that_code(package_copy):
    made_by = RunCode.of_package(package_copy)
    with (package_copy / "weights" / "rsft.py").open("a") as file:
        file.write("\nNEW_OPTION_DEFAULT = None\n")
    now = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules},
              now.source_sha256: {"modules": dict(now.modules), "equivalent_to": made_by.source_sha256,
                                  "evidence": {"runs": []}}}
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []
    with (package_copy / "weights" / "rsft.py").open("a") as file:
        file.write("\nEDITED_AFTER_THE_PROOF = True\n")
    later = RunCode.of_package(package_copy)
    ledger[later.source_sha256] = {**ledger[now.source_sha256]}  # a stale proof copied over: other modules
    assert later.changes_since({"source_sha256": made_by.source_sha256}, ledger), "a proof holds for its code only"


def test_a_proof_of_equivalence_survives_an_edit_to_reporting_code(package_copy):
    made_by = RunCode.of_package(package_copy)
    with (package_copy / "weights" / "rsft.py").open("a") as file:
        file.write("\nNEW_OPTION_DEFAULT = None\n")
    proven = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules},
              proven.source_sha256: {"modules": dict(proven.modules), "equivalent_to": made_by.source_sha256}}
    with (package_copy / "report" / "tables.py").open("a") as file:  # moving or editing reporting code
        file.write("\n# an analysis edit\n")
    now = RunCode.of_package(package_copy)
    assert now.source_sha256 not in ledger and now.modules == proven.modules
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []


def test_proofs_chain_and_a_proven_version_keeps_the_records_it_kept(package_copy):
    """A record made by A; B was proven to run as A; C (this code) was proven to run as B'
    (a later version whose run closure holds A's record modules unchanged or B's exactly): the
    record counts for C. An unproven C does not."""
    a = RunCode.of_package(package_copy)
    with (package_copy / "weights" / "rsft.py").open("a") as file:
        file.write("\nB = 1\n")
    b = RunCode.of_package(package_copy)
    with (package_copy / "rollouts" / "engine.py").open("a") as file:  # a move: every module's bytes differ
        file.write("\nC = 1\n")
    c = RunCode.of_package(package_copy)
    ledger = {a.source_sha256: {"modules": a.modules},
              b.source_sha256: {"modules": dict(b.modules), "equivalent_to": a.source_sha256},
              c.source_sha256: {"modules": dict(c.modules), "equivalent_to": b.source_sha256}}
    assert c.proven_equivalent(ledger) == {a.source_sha256, b.source_sha256}
    assert c.changes_since({"source_sha256": a.source_sha256}, ledger) == []
    # B' differs from B only where the record of A never looked: proven against B', C keeps A's record
    ledger[b.source_sha256].pop("equivalent_to")
    assert c.changes_since({"source_sha256": a.source_sha256}, ledger) != []  # B not proven as A, A's modules edited
    unproven = {k: v for k, v in ledger.items() if k != c.source_sha256}
    assert c.changes_since({"source_sha256": b.source_sha256}, unproven) != []


def test_code_proven_as_a_version_keeps_the_records_whose_run_code_that_version_holds_unchanged(package_copy):
    made_by = RunCode.of_package(package_copy)  # made the record
    (package_copy / "domains" / "extra_part.py").write_text("X = 1\n")  # a new module: the old run never ran it
    later = RunCode.of_package(package_copy)
    assert set(made_by.modules) < set(later.modules)
    with (package_copy / "rollouts" / "engine.py").open("a") as file:  # then every module moves, say
        file.write("\nMOVED = 1\n")
    now = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules}, later.source_sha256: {"modules": later.modules},
              now.source_sha256: {"modules": dict(now.modules), "equivalent_to": later.source_sha256}}
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []
    ledger.pop(now.source_sha256)  # without the proof the move re-makes the record
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) != []


def test_time_fields_alone_do_not_make_two_runs_different():
    from whalekit.repro.code_equivalence import first_difference, timeless

    a = [{"event": "rsft_batch", "loss": 0.5, "timing": {"train": 1.0}, "wall_s": 3.0, "sync_seconds": 0.1}]
    b = [{"event": "rsft_batch", "loss": 0.5, "timing": {"train": 9.0}, "wall_s": 7.0, "sync_seconds": 0.2}]
    assert first_difference(timeless(a), timeless(b)) is None
    c = [{"event": "rsft_batch", "loss": 0.25, "timing": {"train": 1.0}}]
    assert "loss" in str(first_difference(timeless(a), timeless(c)))
