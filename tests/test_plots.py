"""Figures and tables are rebuilt from run directories alone: exact numbers, one colour
per method everywhere, labelled axes, PNG + PDF on disk."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex
from run_fixtures import write_run

from whalekit import plots, tables
from whalekit.archive import Archive
from whalekit.runs import RunDir


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("runs")
    write_run(tmp_path, "whale", [0.25, 0.75, 0.5])
    write_run(tmp_path, "whale", [0.5, 0.25, 1.0], seed=1)
    write_run(tmp_path, "weight_only", [0.25, 0.5, 0.5])
    write_run(tmp_path, "stagewise", [0.0, 0.25, 0.5])
    write_run(tmp_path, "adaptive", [0.25, 0.25, 0.5, 0.5, 0.75])
    write_run(tmp_path, "whale", [0.0, 1.0], schedule="1.0,2")  # a schedule-grid run, not the main one
    return tmp_path


def test_best_so_far_never_decreases_and_is_in_percent(runs_root):
    run = tables.load_run(runs_root / "smoke" / "toy" / "whale-0.5,2-s0")
    assert run.best_so_far() == ([0, 32, 64], [25.0, 75.0, 75.0])
    assert run.best["rollouts"] == 32


def test_main_table_takes_each_methods_default_schedule_and_averages_seeds(runs_root):
    table = tables.main_comparison(runs_root, "smoke")
    cells = dict(zip(table["method"], table["toy"]))
    # whale seeds: best 75 and 100 -> mean 87.5, sample std 17.7; the (1.0, 2) grid run (100) is not "whale" here
    assert cells == {"WHALE": "87.5 ± 17.7", "WHALE (adaptive)": "75.0", "weights only": "50.0",
                     "stagewise (W→H)": "50.0"}
    by_subset = tables.main_comparison(runs_root, "smoke", by_subset=True)
    assert list(by_subset.columns) == ["method", "toy/default"]


def test_schedule_grid_table_lists_preset_schedules_plus_stagewise(runs_root):
    table = tables.schedule_grid(runs_root, "smoke")
    rows = {r["schedule"]: r for r in table.to_dict("records")}
    assert list(rows) == ["(E=0.5, I=2)", "(E=1, I=2)", "stagewise (W→H)"]
    assert rows["(E=1, I=2)"]["best mean@k (%)"] == "100.0"
    assert rows["(E=1, I=2)"]["rollouts at best"] == "32"
    assert rows["(E=1, I=2)"]["rollouts consumed"] == "32"
    assert rows["(E=0.5, I=2)"]["seeds"] == 2


def test_unfinished_runs_are_left_out(tmp_path):
    write_run(tmp_path, "weight_only", [0.5, 0.5])
    write_run(tmp_path, "harness_only", [0.5, 0.5]).commit({"finished": False})
    assert [r.method for r in tables.find_runs(tmp_path, "smoke")] == ["weight_only"]


def test_save_table_writes_markdown_and_csv(runs_root, tmp_path):
    paths = tables.save_table(tables.main_comparison(runs_root, "smoke"), tmp_path / "out" / "table2_main")
    md, csv = (p.read_text() for p in paths)
    assert [p.name for p in paths] == ["table2_main.md", "table2_main.csv"]
    assert "| method | toy |" in md and "best test mean@2 (%)" in md
    assert csv.splitlines()[0] == "method,toy"


def _line_colours(fig):
    return {line.get_label(): to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()}


def test_each_method_has_one_colour_in_every_figure(runs_root):
    main = tables.main_runs(runs_root, "smoke")
    figure2 = _line_colours(plots.best_so_far_figure(main))
    figure3 = _line_colours(plots.bottleneck_figure(main))
    for label, method in (("WHALE", "whale"), ("weights only", "weight_only"), ("stagewise (W→H)", "stagewise")):
        assert figure2[label] == figure3[label] == plots.METHOD_COLOURS[method]
    figure1b = plots.best_accuracy_figure(main)
    bars = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in figure1b.axes[0].containers}
    assert bars["WHALE"] == plots.METHOD_COLOURS["whale"] and bars["weights only"] == plots.METHOD_COLOURS[
        "weight_only"]


def test_axes_carry_units(runs_root):
    main = tables.main_runs(runs_root, "smoke")
    ax = plots.best_so_far_figure(main).axes[0]
    assert ax.get_xlabel() == "rollouts" and ax.get_ylabel() == "best-so-far test mean@2 (%)"
    bottleneck = plots.bottleneck_figure(main)
    labels = {a.get_title(): a.get_ylabel() for a in bottleneck.axes}
    assert labels["answered"] == "answered (% of test samples)"
    assert labels["turns"] == "turns (mean per sample)"


def test_bottleneck_marks_each_methods_best_accuracy_rollout(runs_root):
    main = [r for r in tables.main_runs(runs_root, "smoke") if r.method == "weight_only"]
    ax = plots.bottleneck_figure(main, ["answered"]).axes[0]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    # weight_only reached its best (50 %) first at 32 rollouts; answered there = 75 %
    assert [(list(s.get_xdata()), list(s.get_ydata())) for s in stars] == [([32], [75.0])]


def test_adaptive_cycles_count_epochs_and_iterations(runs_root):
    run = tables.load_run(runs_root / "smoke" / "toy" / "adaptive-s0")
    cycles = plots.adaptive_cycles(run)
    # smoke: 4 samples per problem, 8 training problems -> 32 sampled rollouts = 1 epoch
    assert [(c["epochs"], c["iterations"]) for c in cycles] == [(1.0, 1), (1.0, 1)]
    fig = plots.adaptive_figure([run])
    dashed = [line for ax in fig.axes for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert sorted(line.get_ydata()[0] for line in dashed) == [0.5, 1.0]  # 1 batch of 4/8 problems; 1 iteration


def test_lineage_places_parents_between_children_and_highlights_the_accepted_path(runs_root):
    assert plots.lineage_layout({"a": None, "b": "a", "c": "a", "d": "c"}) == {
        "b": (1.0, 0.0), "d": (2.0, 1.0), "c": (1.0, 1.0), "a": (0.0, 0.5)}
    root = runs_root / "smoke" / "toy" / "whale-0.5,2-s0"
    archive = Archive.open(root / "archive", "toy")
    accepted = RunDir(root).events("run_end")[-1]["accepted_id"]
    ax = plots.lineage_figure(archive, accepted).axes[0]
    thick = [line for line in ax.get_lines() if line.get_linewidth() > 2]
    assert len(thick) == 1  # seed -> accepted child; the other child's edge is thin


def test_save_figure_writes_non_empty_png_and_pdf(runs_root, tmp_path):
    fig = plots.schedule_grid_figure(tables.grid_runs(runs_root, "smoke"))
    paths = plots.save_figure(fig, tmp_path / "figs" / "fig4_schedule_grid")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and paths[1].read_bytes()[:4] == b"%PDF"


def test_a_run_curve_names_the_run(runs_root):
    run = tables.load_run(runs_root / "smoke" / "toy" / "whale-0.5,2-s0")
    ax = plots.run_curve_figure(run).axes[0]
    assert "whale-0.5,2-s0" in ax.get_title() and ax.get_ylabel() == "test mean@2 (%)"


def test_no_runs_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no finished runs"):
        tables.main_comparison(tmp_path, "smoke")
    with pytest.raises(ValueError, match="no finished runs"):
        plots.best_so_far_figure([])
