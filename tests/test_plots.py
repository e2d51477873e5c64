"""Figures and tables are rebuilt from run directories alone: exact numbers, one colour
per method everywhere, labelled axes, PNG + PDF on disk."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer
from run_fixtures import trajectory, write_run

from whalekit.infra.runs import RunDir
from whalekit.report import behaviour_plots, plot_style, plots, run_summaries, tables
from whalekit.search.archive import Archive


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("runs")
    write_run(tmp_path, "whale", [0.25, 0.75, 0.5], problems=4)
    write_run(tmp_path, "whale", [0.5, 0.25, 1.0], seed=1, problems=4)
    write_run(tmp_path, "weight_only", [0.25, 0.5, 0.5], problems=4)
    write_run(tmp_path, "stagewise", [0.0, 0.25, 0.5], problems=4)
    write_run(tmp_path, "adaptive", [0.25, 0.25, 0.5, 0.5, 0.75], problems=4)
    write_run(tmp_path, "whale", [0.0, 1.0], schedule="1.0,2", problems=4)  # a schedule-grid run, not the main one
    return tmp_path


def test_best_so_far_never_decreases_and_is_in_percent(runs_root):
    run = run_summaries.load_run(runs_root / "smoke" / "toy" / "whale-0.5,2-s0")
    assert run.best_so_far() == ([0, 32, 64], [25.0, 75.0, 75.0])
    assert run.best["rollouts"] == 32


def _mean_and_interval(cell):
    mean, rest = cell.split(" [")
    low, high = rest.split("]")[0].split(", ")
    return float(mean), float(low), float(high), rest.split("n=")[1]


def test_main_table_shows_the_final_number_with_an_interval_over_seeds_and_problems(runs_root):
    table = tables.main_comparison(runs_root, "smoke")
    cells = dict(zip(table["method"], table["toy"]))
    # whale finals: seed 0 50 %, seed 1 100 % -> 75; the (1.0, 2) grid run is not "whale" here
    mean, low, high, seeds = _mean_and_interval(cells["WHALE"])
    assert (mean, seeds) == (75.0, "2") and low < 75.0 < high
    assert _mean_and_interval(cells["weights only"])[::3] == (50.0, "1 (problem noise only)")
    assert _mean_and_interval(cells["WHALE (adaptive)"])[0] == 75.0
    assert "final test mean@2 (%, after the whole budget)" in table.attrs["caption"]
    by_subset = tables.main_comparison(runs_root, "smoke", by_subset=True)
    assert list(by_subset.columns) == ["method", "toy/default"]


def test_every_table_carries_the_h0_control_and_an_optional_floor(runs_root):
    class Floor:  # the shape of whalekit.domains.chess.baselines.RandomBaseline
        mean_at_k, per_task = 0.125, {"toy-0": 0.0, "toy-1": 0.5, "toy-2": 0.0, "toy-3": 0.0}

    table = tables.main_comparison(runs_root, "smoke", floors={"toy": {0: Floor()}})
    cells = dict(zip(table["method"], table["toy"]))
    # h0 = each seed's first evaluation: whale seed 0 (25 %) and seed 1 (50 %)
    assert _mean_and_interval(cells[tables.H0_LABEL])[::3] == (37.5, "2")
    assert _mean_and_interval(cells[tables.FLOOR_LABEL])[::3] == (12.5, "1 (problem noise only)")
    assert tables.H0_LABEL in set(tables.schedule_grid(runs_root, "smoke")["schedule"])
    assert tables.H0_LABEL in set(tables.points_table(runs_root, "smoke")["method"])
    assert tables.main_comparison(runs_root, "smoke", floors={"toy": 0.04})["toy"].iloc[-1] == "4.0 (no interval)"


def test_the_floor_is_computed_on_each_seeds_own_test_problems(runs_root):
    calls = []

    def score(tasks, k, seed):
        calls.append((len(tasks), k, seed))
        return 0.5

    floors = tables.floor_scores(run_summaries.main_runs(runs_root, "smoke"), score)
    assert floors == {"toy": {0: 0.5, 1: 0.5}} and sorted(calls) == [(4, 2, 0), (4, 2, 1)]


def test_three_numbers_per_run_final_selected_by_own_signal_and_best_on_test(tmp_path):
    run = write_run(tmp_path, "harness_only", [0.25, 1.0, 0.75, 0.5], problems=4)
    archive = Archive.open(run.root / "archive", "toy")
    seed_id = archive.seed_id()
    # search-split scores of the evaluated harness (the seed) at weights versions 1..3:
    archive.record_evaluation(seed_id, 1, [trajectory(correct=False)], [None])  # 0.0
    archive.record_evaluation(seed_id, 2, [trajectory(correct=True)], [None])  # 1.0: the signal's pick
    archive.record_evaluation(seed_id, 3, [trajectory(correct=True), trajectory(correct=False)], [None, None])  # 0.5
    summary = run_summaries.load_run(run.root)
    assert summary.selection_signals() == [0.0, 0.0, 1.0, 0.5]
    assert (summary.final["index"], summary.selected["index"], summary.best["index"]) == (3, 2, 1)
    table = tables.points_table(tmp_path, "smoke")
    row = table[table["method"] == "harness only"].iloc[0]
    labels = [c for c in table.columns if "mean@2" in c]
    assert [float(row[c].split()[0]) for c in labels] == [50.0, 75.0, 100.0]
    assert labels[-1].endswith("(selected on test)") and "no test data" in labels[1]


def test_weights_only_runs_select_on_their_training_reward(runs_root):
    run = run_summaries.load_run(runs_root / "smoke" / "toy" / "weight_only-s0")
    assert run.selection_signals() == [None, 0.5, 0.5]  # no signal before the first RSFT batch
    assert run.selected is run.final  # ties go to the latest evaluation


def test_paired_table_pairs_seeds_and_problems(runs_root):
    table = tables.paired_comparison(runs_root, "smoke")
    cells = dict(zip(table["comparison"], table["toy"]))
    # weights only has seed 0 only; both solve tasks 0 and 1 at the end: difference exactly 0
    assert cells["WHALE − weights only"] == "+0.0 [+0.0, +0.0] n=1 (problem noise only)"
    # against h0: seed 0 gains 25 points, seed 1 gains 50 -> 37.5
    mean, low, high, seeds = _mean_and_interval(cells[f"WHALE − {tables.H0_LABEL}"])
    assert (mean, seeds) == (37.5, "2") and low <= 25.0 and high >= 50.0


@pytest.fixture
def with_absent_runs(runs_root, tmp_path):
    """The toy runs plus a chess domain where only WHALE finished."""
    import shutil

    shutil.copytree(runs_root, tmp_path, dirs_exist_ok=True)
    write_run(tmp_path, "whale", [0.25, 0.5], domain="chess", problems=4)
    return tmp_path


def test_absent_runs_are_drawn_as_absent_never_as_zero(with_absent_runs):
    table = tables.main_comparison(with_absent_runs, "smoke")
    chess = dict(zip(table["method"], table["chess"]))
    assert chess["weights only"] == tables.ABSENT and chess["WHALE"].startswith("50.0 [")
    assert tables.paired_comparison(with_absent_runs, "smoke")["chess"].iloc[0] == tables.ABSENT
    fig = plots.accuracy_bars_figure(run_summaries.main_runs(with_absent_runs, "smoke"))
    ax = fig.axes[0]
    assert sum(t.get_text() == "not run" for t in ax.texts) == 3  # adaptive, weights only, stagewise on chess
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 3 and all(p.get_label() == "not run" for p in hatched)
    heights = [p.get_height() for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]
    assert len(heights) == 5  # four methods on toy, WHALE on chess: no zero-height stand-ins


def test_schedule_grid_table_lists_preset_schedules_plus_stagewise(runs_root):
    table = tables.schedule_grid(runs_root, "smoke")
    rows = {r["schedule"]: r for r in table.to_dict("records")}
    assert list(rows) == ["(E=0.5, I=2)", "(E=1, I=2)", "stagewise (W→H)", tables.H0_LABEL]
    final, best = "final test mean@2 (%, after the whole budget)", "best test mean@2 (%) over evaluations " \
        "(selected on test)"
    assert rows["(E=1, I=2)"][final] == rows["(E=1, I=2)"][best] == "100.0 [100.0, 100.0] n=1 (problem noise only)"
    assert rows["(E=1, I=2)"]["rollouts at best"] == "32"
    assert rows["(E=1, I=2)"]["rollouts consumed"] == "32"
    assert rows["(E=0.5, I=2)"]["seeds"] == 2


def test_unfinished_runs_are_left_out(tmp_path):
    write_run(tmp_path, "weight_only", [0.5, 0.5])
    write_run(tmp_path, "harness_only", [0.5, 0.5]).commit({"finished": False})
    assert [r.method for r in run_summaries.find_runs(tmp_path, "smoke")] == ["weight_only"]


def test_save_table_writes_markdown_and_csv(runs_root, tmp_path):
    paths = tables.save_table(tables.main_comparison(runs_root, "smoke"), tmp_path / "out" / "table2_main")
    md, csv = (p.read_text() for p in paths)
    assert [p.name for p in paths] == ["table2_main.md", "table2_main.csv"]
    assert "| method | toy |" in md and "final test mean@2 (%" in md
    assert csv.splitlines()[0] == "method,toy"


def _line_colours(fig):
    return {line.get_label(): to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()}


def test_each_method_has_one_colour_in_every_figure(runs_root):
    main = run_summaries.main_runs(runs_root, "smoke")
    figure2 = _line_colours(plots.best_so_far_figure(main))
    figure3 = _line_colours(behaviour_plots.bottleneck_figure(main))
    for label, method in (("WHALE", "whale"), ("weights only", "weight_only"), ("stagewise (W→H)", "stagewise")):
        assert figure2[label] == figure3[label] == plot_style.METHOD_COLOURS[method]
    figure1b = plots.best_accuracy_figure(main)
    bars = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in figure1b.axes[0].containers
            if isinstance(c, BarContainer)}
    assert bars["WHALE"] == plot_style.METHOD_COLOURS["whale"] and bars["weights only"] == plot_style.METHOD_COLOURS[
        "weight_only"]


def test_axes_carry_units_and_figures_say_which_number_they_show(runs_root):
    main = run_summaries.main_runs(runs_root, "smoke")
    figure2 = plots.best_so_far_figure(main)
    assert figure2.axes[0].get_xlabel() == "rollouts"
    assert figure2.axes[0].get_ylabel() == "best so far (%)"
    assert "test mean@2" in figure2.get_suptitle() and "selected on test" in figure2.get_suptitle()
    assert "at each evaluation" in plots.accuracy_curve_figure(main).get_suptitle()
    assert plots.accuracy_bars_figure(main).axes[0].get_title().startswith("final test mean@2")
    assert "selected on test" in plots.best_accuracy_figure(main).axes[0].get_title()
    bottleneck = behaviour_plots.bottleneck_figure(main)
    labels = {a.get_title(): a.get_ylabel() for a in bottleneck.axes}  # the metric on top, its unit beside the axis
    assert labels["answered"] == "% of test samples"
    assert labels["turns"] == "mean per sample"


def test_bottleneck_marks_each_methods_best_accuracy_rollout(runs_root):
    main = [r for r in run_summaries.main_runs(runs_root, "smoke") if r.method == "weight_only"]
    ax = behaviour_plots.bottleneck_figure(main, ["answered"]).axes[0]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    # weight_only reached its best (50 %) first at 32 rollouts; answered there = 75 %
    assert [(list(s.get_xdata()), list(s.get_ydata())) for s in stars] == [([32], [75.0])]


def test_adaptive_cycles_count_epochs_and_iterations(runs_root):
    run = run_summaries.load_run(runs_root / "smoke" / "toy" / "adaptive-s0")
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
    fig = plots.schedule_grid_figure(run_summaries.grid_runs(runs_root, "smoke"))
    paths = plot_style.save_figure(fig, tmp_path / "figs" / "fig4_schedule_grid")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and paths[1].read_bytes()[:4] == b"%PDF"


def test_a_run_curve_names_the_run(runs_root):
    run = run_summaries.load_run(runs_root / "smoke" / "toy" / "whale-0.5,2-s0")
    ax = plots.run_curve_figure(run).axes[0]
    assert "whale-0.5,2-s0" in ax.get_title() and ax.get_ylabel() == "test mean@2 (%)"


def test_no_runs_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no finished runs"):
        tables.main_comparison(tmp_path, "smoke")
    with pytest.raises(ValueError, match="no finished runs"):
        plots.best_so_far_figure([])


def test_figure_2_draws_the_mean_over_seeds_with_a_band(runs_root):
    whale = [r for r in run_summaries.main_runs(runs_root, "smoke") if r.method == "whale"]
    xs, curve = plots.accuracy_curve(whale)
    # seed 0: 25, 75, 50; seed 1: 50, 25, 100 (%)
    assert xs == [0, 32, 64] and [100 * c.mean for c in curve] == [37.5, 50.0, 75.0]
    assert all(c.low <= c.mean <= c.high and c.n_seeds == 2 for c in curve)
    ax = plots.accuracy_curve_figure(whale).axes[0]
    assert len(ax.collections) == 1  # the band
    line = next(line for line in ax.get_lines() if line.get_label() == "WHALE")
    assert list(line.get_ydata()) == [37.5, 50.0, 75.0]
    assert any(line.get_label() == tables.H0_LABEL for line in ax.get_lines())


def _every_figure(runs_root, main):
    root = runs_root / "smoke" / "toy" / "whale-0.5,2-s0"
    archive = Archive.open(root / "archive", "toy")
    return {"run curve": plots.run_curve_figure(run_summaries.load_run(root)),
            "figure 1b": plots.accuracy_bars_figure(main, floors={"toy": 0.1}),
            "figure 1b (best)": plots.best_accuracy_figure(main),
            "figure 2": plots.accuracy_curve_figure(main, floors={"toy": 0.1}),
            "figure 2 (best so far)": plots.best_so_far_figure(main),
            "figure 3": behaviour_plots.bottleneck_figure([r for r in main if r.domain == "toy"]),
            "figure 4": plots.schedule_grid_figure(run_summaries.grid_runs(runs_root, "smoke")),
            "figure 6": plots.adaptive_figure(run_summaries.find_runs(runs_root, "smoke", method="adaptive")),
            "lineage": plots.lineage_figure(archive)}


def test_no_two_texts_overlap_in_any_figure(with_absent_runs):
    main = run_summaries.main_runs(with_absent_runs, "smoke")
    toy = [r for r in main if r.domain == "toy"]
    for runs in (main, toy):
        for name, fig in _every_figure(with_absent_runs, runs).items():
            assert plot_style.overlapping_texts(fig) == [], name
            plt.close(fig)


def test_the_overlap_check_finds_overlapping_text():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "one label")
    ax.text(0.5, 0.5, "another label")
    assert plot_style.overlapping_texts(fig) == [("one label", "another label")]


def test_a_metrics_unit_follows_its_kind_not_its_values(tmp_path):
    """turns is a count in every domain: a mean of 1.0 turn is "mean per sample", never 100 %."""
    run = run_summaries.load_run(write_run(tmp_path, "whale", [0.25]).root)  # one evaluation: turns = 1.0, answered 0.5
    assert behaviour_plots.behaviour_units([run]) == {"answered": "% of test samples", "turns": "mean per sample"}
    chess = run_summaries.load_run(write_run(tmp_path, "whale", [0.5], domain="chess").root)
    assert behaviour_plots.behaviour_units([chess])["turns"] == "mean per sample"


def test_constant_behaviour_panels_are_left_out_and_named(tmp_path):
    write_run(tmp_path, "whale", [0.75, 0.75, 1.0])  # answered = min(1, accuracy + 0.25) = 100 % throughout
    fig = behaviour_plots.bottleneck_figure(run_summaries.main_runs(tmp_path, "smoke"))
    assert [ax.get_title() for ax in fig.axes] == ["turns"]
    assert "constant in every run, not drawn: answered = 100 %" in fig.get_suptitle()


def test_behaviour_lines_are_the_mean_over_seeds_with_a_band(runs_root):
    whale = [r for r in run_summaries.main_runs(runs_root, "smoke") if r.method == "whale"]
    xs, curve = behaviour_plots.behaviour_curve(whale, "turns")
    assert xs == [0, 32, 64] and [c.mean for c in curve] == [1.0, 2.0, 3.0] and curve[0].n_seeds == 2
    ax = behaviour_plots.bottleneck_figure(whale, ["answered"]).axes[0]
    line = next(line for line in ax.get_lines() if line.get_label() == "WHALE")
    # answered: seed 0 50, 100, 75 %; seed 1 75, 50, 100 %
    assert list(line.get_ydata()) == [62.5, 75.0, 87.5] and len(ax.collections) == 1
    assert "band: 95 % t-interval over the seed means" in ax.figure.get_suptitle()


def test_the_lineage_colour_scale_is_fitted_to_the_scores(runs_root):
    assert plots.fitted_range([3.0, 17.5]) == (0.0, 20.0)
    assert plots.fitted_range([40.0, 41.0]) == (40.0, 45.0)
    assert plots.fitted_range([50.0]) == (47.5, 52.5)
    archive = Archive.open(runs_root / "smoke" / "toy" / "whale-0.5,2-s0" / "archive", "toy")
    (points,) = [c for c in plots.lineage_figure(archive).axes[0].collections if c.get_array() is not None]
    assert points.get_clim() == plots.fitted_range([100 * e.scores[max(e.scores)]["score"]
                                                    for e in archive.entries() if e.scores])


def test_figure_2_names_the_methods_a_domain_never_ran(with_absent_runs):
    fig = plots.accuracy_curve_figure(run_summaries.main_runs(with_absent_runs, "smoke"))
    titles = [ax.get_title() for ax in fig.axes]
    noted = " ".join(" ".join(t.split("\n")[1:]) for t in titles if t.startswith("chess: "))
    for absent in ("WHALE (adaptive)", "weights only", "stagewise (W→H)"):  # each in its own group's panel
        assert absent in " ".join(noted.split()), (absent, noted)
    toy = [t for t in titles if t.startswith("toy: ")]
    assert toy and all("\n" not in t for t in toy)  # toy ran every method the figure draws


def test_every_figure_uses_constrained_layout(with_absent_runs):
    main = run_summaries.main_runs(with_absent_runs, "smoke")
    for name, fig in _every_figure(with_absent_runs, main).items():
        assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine", name
        plt.close(fig)


def _with_intermediate_k(run: RunDir, k: int) -> None:
    """Rewrite a run's test_eval events as a run with eval_k_intermediate = k records them:
    the first and last evaluation keep their k, those between have `k`."""
    events = run.events()
    evals = [i for i, e in enumerate(events) if e["event"] == "test_eval"]
    for i in evals[1:-1]:
        events[i]["k"] = k
    run.events_path.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_point_taken_from_an_intermediate_evaluation_is_labelled_with_its_own_k(tmp_path):
    _with_intermediate_k(write_run(tmp_path, "weight_only", [0.25, 1.0, 0.5], problems=4), k=1)
    runs = run_summaries.find_runs(tmp_path, "smoke")
    assert run_summaries.point_k(runs, "best") == "1" and run_summaries.point_k(runs, "final") == "2"
    table = tables.points_table(tmp_path, "smoke")
    assert "best test mean@1 (%) over evaluations (selected on test)" in table.columns
    assert "final test mean@2 (%, after the whole budget)" in table.columns
    title = plots.accuracy_curve_figure(runs)._suptitle.get_text()
    assert "mean@2 (mean@1 between the first and last evaluation)" in title


def test_the_schedule_grid_leaves_out_the_zero_start_runs(tmp_path):
    write_run(tmp_path, "whale", [0.25, 0.5], problems=4)
    zero = write_run(tmp_path, "whale", [0.0, 1.0], seed=1, problems=4)
    zero.write_config({**zero.config(), "initial_harness": "h0_faithful"})  # from the authors' faithful h0
    grid = run_summaries.grid_runs(tmp_path, "smoke")
    assert [(r.method, r.seed) for r in grid] == [("whale", 0)]
