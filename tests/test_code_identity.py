"""A record is re-made only when code that a run executes changes (whalekit.repro.code_identity):
reporting and reproduction lie outside a run's import closure, so editing them keeps every
record valid, while editing the loss, the engine or a domain does not."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from whalekit.provenance import PACKAGE_DIR, source_sha256
from whalekit.repro.code_identity import RunCode, ledger_entries, run_closure

ROOT = PACKAGE_DIR.parent
FRONT_ENDS = ("cli", "cli_config", "cli_harness", "calibration")  # and every module in report/ and repro/
COMPUTING = ("whale", "rsft", "rsft_loss", "engine", "episode", "search", "evaluation", "samplers/vllm",
             "domains/chess/verifier", "proposers/reflective", "harness_worker", "sandbox")


def _closure() -> list[str]:
    files = [p.relative_to(ROOT).as_posix() for p in PACKAGE_DIR.rglob("*.py")]
    return run_closure(files, lambda path: (ROOT / path).read_bytes())


def test_a_run_executes_the_driver_and_its_parts_but_no_reporting_or_reproduction_code():
    closure = set(_closure())
    missing = [m for m in COMPUTING if f"whalekit/{m}.py" not in closure]
    assert not missing, f"modules a run executes are outside its closure: {missing}"
    above = [p.relative_to(ROOT).as_posix() for folder in ("report", "repro")
             for p in (PACKAGE_DIR / folder).rglob("*.py")]
    assert len(above) > 20
    reached = [m for m in [*above, *(f"whalekit/{m}.py" for m in FRONT_ENDS)] if m in closure]
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


@pytest.mark.parametrize("edited", ["rsft_loss.py", "engine.py", "domains/math/verifier.py"])
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
    with (package_copy / "rsft.py").open("a") as file:
        file.write("\nNEW_OPTION_DEFAULT = None\n")
    now = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules},
              now.source_sha256: {"modules": dict(now.modules), "equivalent_to": made_by.source_sha256,
                                  "evidence": {"runs": []}}}
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []
    with (package_copy / "rsft.py").open("a") as file:
        file.write("\nEDITED_AFTER_THE_PROOF = True\n")
    later = RunCode.of_package(package_copy)
    ledger[later.source_sha256] = {**ledger[now.source_sha256]}  # a stale proof copied over: other modules
    assert later.changes_since({"source_sha256": made_by.source_sha256}, ledger), "a proof holds for its code only"


def test_a_proof_of_equivalence_survives_an_edit_to_reporting_code(package_copy):
    made_by = RunCode.of_package(package_copy)
    with (package_copy / "rsft.py").open("a") as file:
        file.write("\nNEW_OPTION_DEFAULT = None\n")
    proven = RunCode.of_package(package_copy)
    ledger = {made_by.source_sha256: {"modules": made_by.modules},
              proven.source_sha256: {"modules": dict(proven.modules), "equivalent_to": made_by.source_sha256}}
    with (package_copy / "report" / "tables.py").open("a") as file:  # moving or editing reporting code
        file.write("\n# an analysis edit\n")
    now = RunCode.of_package(package_copy)
    assert now.source_sha256 not in ledger and now.modules == proven.modules
    assert now.changes_since({"source_sha256": made_by.source_sha256}, ledger) == []


def test_time_fields_alone_do_not_make_two_runs_different():
    from whalekit.repro.code_equivalence import first_difference, timeless

    a = [{"event": "rsft_batch", "loss": 0.5, "timing": {"train": 1.0}, "wall_s": 3.0, "sync_seconds": 0.1}]
    b = [{"event": "rsft_batch", "loss": 0.5, "timing": {"train": 9.0}, "wall_s": 7.0, "sync_seconds": 0.2}]
    assert first_difference(timeless(a), timeless(b)) is None
    c = [{"event": "rsft_batch", "loss": 0.25, "timing": {"train": 1.0}}]
    assert "loss" in str(first_difference(timeless(a), timeless(c)))
