"""The one table of methods (whalekit.methods): every module that names methods reads it."""

from __future__ import annotations

import pytest

from whalekit import methods, plot_style, reproduce_plan, run_summaries, schedules, tables, whale


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


def test_the_driver_and_the_schedules_agree_with_the_table():
    """The driver's configuration reads the table (re-exported by whale.py); schedules.py still
    spells its tuple out (pending #29's split of schedules): it must say what the table says."""
    assert whale.METHODS_ALL is methods.METHOD_NAMES and schedules.METHODS == methods.METHOD_NAMES
    assert whale.WEIGHT_METHODS is methods.WEIGHT_METHODS
    assert whale.SEARCH_METHODS is methods.SEARCH_METHODS
    assert whale.SEARCH_CAPPED is methods.SEARCH_CAPPED


def test_an_unknown_method_names_every_known_one():
    assert methods.method("fst").label == "FST (prompt only)"
    with pytest.raises(ValueError, match="unknown method 'wale'; known: whale, weight_only, .*, adaptive"):
        methods.method("wale")
