"""The one table of methods (whalekit.run.methods): every module that names methods reads it, and a
method is one row (a fixture method added as a row runs on the smoke preset)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest

from whalekit.report import plot_style, run_summaries, tables
from whalekit.repro import reproduce_plan
from whalekit.run import budget_accounting, config, methods, schedules, stage_scheduling
from whalekit.run import driver as whale
from whalekit.run.phases import rsft as rsft_phase
from whalekit.run.phases import search as search_phase
from whalekit.samplers.models import load_policy
from whalekit.search.archive import Archive, archive_folders


def test_the_table_holds_the_seven_methods_once_each():
    assert methods.METHOD_NAMES == ("whale", "weight_only", "harness_only", "stagewise", "stagewise_reverse", "fst",
                                    "adaptive")
    assert sorted(m.order for m in methods.METHODS) == list(range(len(methods.METHODS)))
    assert len({m.colour for m in methods.METHODS}) == len({m.label for m in methods.METHODS}) == 7


def test_tables_figures_and_the_reproduction_read_the_table():
    assert tables.METHOD_ORDER is methods.METHOD_ORDER and tables.METHOD_LABELS is methods.METHOD_LABELS
    assert plot_style.METHOD_COLOURS is methods.METHOD_COLOURS
    assert run_summaries.SEARCH_METHODS is methods.SEARCH_METHODS
    assert reproduce_plan.METHODS is methods.METHOD_NAMES


def _strings_in_code(part: object) -> set[str]:
    """The string constants of `part`'s source, its docstrings (examples) left out."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(part)))  # type: ignore[arg-type]
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_the_driver_and_the_schedules_name_no_method_of_their_own():
    """The run's modules read a method's row; none spells out a method's name or a list of them."""
    assert not hasattr(schedules, "METHODS")
    for part in (schedules, stage_scheduling, budget_accounting, config.RunConfig.run_name.fget, whale, search_phase,
                 rsft_phase):
        named = _strings_in_code(part) & set(methods.METHOD_NAMES)
        assert not named, f"{getattr(part, '__name__', part)} names the methods {named}"


def test_the_rows_keep_the_methods_as_they_were():
    """What the seven rows say (the booleans the table used to spell out, the run names)."""
    assert methods.WEIGHT_METHODS == ("whale", "weight_only", "stagewise", "stagewise_reverse", "fst", "adaptive")
    assert methods.SEARCH_METHODS == ("whale", "harness_only", "stagewise", "stagewise_reverse", "fst", "adaptive")
    assert methods.SEARCH_CAPPED == ("harness_only", "stagewise", "stagewise_reverse")
    assert [m.name for m in methods.METHODS if m.prompt_only] == ["fst"]
    assert [m.name for m in methods.METHODS if not m.schedule_in_name] == ["weight_only", "harness_only", "adaptive"]
    with pytest.raises(ValueError, match="stages 'sideways'"):
        methods.Method("odd", "sideways", False, "odd", "#000000", 7)


# A baseline that is not in the table: stagewise (weights, then harness) with FST's prompt-only proposer.
FIXTURE = methods.Method("stagewise_fst", "weight_then_harness", True, "stagewise FST", "#000000", 7,
                         prompt_only=True)


@pytest.mark.timeout(600)
def test_a_method_added_as_one_row_runs_on_the_smoke_preset(tmp_path, monkeypatch):
    """Adding a method is adding its row: nothing else is edited for it to run."""
    monkeypatch.setattr(methods, "METHODS", (*methods.METHODS, FIXTURE))
    monkeypatch.setitem(methods.BY_NAME, FIXTURE.name, FIXTURE)
    run_config = whale.resolve_config("smoke", domain="toy", method=FIXTURE.name, runs_root=str(tmp_path))
    assert run_config.run_name == "stagewise_fst-0.5,2-s0"
    run = whale.run_method(run_config, policy=load_policy("tiny-random"))
    kinds = [e["kind"] for e in run.events("stage_start")]
    assert kinds[0] == "weight" and "harness" in kinds and kinds == sorted(kinds, key=["weight", "harness"].index)
    end = run.events("run_end")[-1]
    # both phases spent rollouts; the run may stop short of the budget when FST's few prompt
    # wordings run out on the toy domain (an empty harness stage stalls the run)
    assert end["budget"] == 96 and 0 < end["rollouts"] <= 96 and len(end["by_phase"]) == 2, end
    assert all(spent > 0 for spent in end["by_phase"].values()), end["by_phase"]
    proposers = {e.proposer for folder in archive_folders(Path(run.root) / "archive")
                 for e in Archive.open(folder, "toy").entries() if e.proposer != "seed"}
    assert proposers and all(p.startswith("prompt_only(") for p in proposers), proposers
    assert dataclasses.replace(FIXTURE, prompt_only=False).stagewise == ("weight", "harness")


def test_an_unknown_method_names_every_known_one():
    assert methods.method("fst").label == "FST (prompt only)"
    with pytest.raises(ValueError, match="unknown method 'wale'; known: whale, weight_only, .*, adaptive"):
        methods.method("wale")
