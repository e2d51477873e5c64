"""The paper's figures, drawn with matplotlib from run directories or the committed
records (whalekit.records.results; never from notebook outputs), so `results/` alone reproduces
every figure: one run's curve, Figures 1b and 2 (accuracy), 4 (schedule grid), 6 (adaptive
schedule) and the harness lineage. Figure 3 (behaviour) is `whalekit.report.behaviour_plots`; the
look every figure shares (style, sizes, colours, saving) is `whalekit.report.plot_style`.

Every figure uses the same colour per method (`whalekit.run.methods`), labels its axes with
units ("rollouts", "test mean@8 (%)"), is sized for a paper column (readable at 100 %),
and `plot_style.save_figure` writes it as PNG and PDF.

    fig = accuracy_curve_figure(main_runs("runs", "cpu"))    # Figure 2: mean over seeds, 95 % band
    save_figure(fig, "figures/fig2_test_accuracy")          # .png + .pdf (whalekit.report.plot_style)

Every figure says which of a run's numbers it shows (final, selected by the run's own
signal, or best over evaluations = selected on test), draws h0 with the initial weights
beside the methods, marks a run never made as "not run" (hatched bars, a panel note; never
as 0), draws 95 % t-intervals over the seed means (whalekit.report.stats), saves PNGs at print resolution, gives a
behaviour metric the unit of its kind in every domain (a yes/no flag in % of samples, a
count as a mean per sample), leaves out constant panels and names them, fits colour scales
to the data, and lays its text out with constrained layout so that no two labels overlap
(`plot_style.overlapping_texts` checks every figure in tests/test_plots.py).
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from whalekit.report.plot_style import (
    ABSENT_COLOUR,
    COLUMN_WIDTH,
    CONTROL_COLOUR,
    FIGURE_RESAMPLES,
    NOT_RUN,
    PAGE_WIDTH,
    PAPER_STYLE,
    SCHEDULE_STYLES,
    accuracy_label,
    conditions_caption,
    figure,
    legend,
    method_colour,
    paper_style,
    require,
)
from whalekit.report.run_summaries import DOMAIN_ORDER, RunSummary, curve_k, point_k
from whalekit.report.stats import Interval, seed_interval
from whalekit.report.tables import (
    FLOOR_LABEL,
    H0_LABEL,
    POINT_LABELS,
    floor_interval,
    initial_runs,
    interval,
    schedule_label,
)
from whalekit.run.methods import METHOD_LABELS, METHOD_ORDER
from whalekit.run.schedules import AdaptiveConfig

if TYPE_CHECKING:
    from whalekit.search.archive import Archive


def _by_domain(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = {}
    for run in runs:
        groups.setdefault(run.domain, []).append(run)
    return dict(sorted(groups.items(), key=lambda kv: DOMAIN_ORDER.index(kv[0]) if kv[0] in DOMAIN_ORDER else 99))


def _not_run_note(runs: list[RunSummary], domain_runs: list[RunSummary], shown: tuple[str, ...] | None = None) -> str:
    """A panel's note naming the methods drawn elsewhere in the figure but never run here
    (absent, not 0); `shown`: only those of the panel's own method group."""
    methods = {r.method for r in domain_runs}
    missing = [METHOD_LABELS.get(m, m) for m in METHOD_ORDER if m not in methods and any(r.method == m for r in runs)
               and (shown is None or m in shown)]
    # wrapped to a panel's width (three to a page row), so it never reaches the next panel
    return "\n" + textwrap.fill(f"{NOT_RUN}: " + ", ".join(missing), 34) if missing else ""


# -- one run (notebook 02) -------------------------------------------------------------
@paper_style
def run_curve_figure(run: RunSummary) -> Figure:
    """One run: test mean@k at every evaluation and the best so far, against rollouts,
    with the weight / harness stages shaded."""
    fig, (ax,) = figure(1, COLUMN_WIDTH, 2.4)
    xs = [e["rollouts"] for e in run.evals]
    colour = method_colour(run.method)
    for stage in run.of("stage_end"):
        start = stage["rollouts"] - stage["stage_rollouts"]
        if stage["kind"] == "harness" and stage["stage_rollouts"]:
            ax.axvspan(start, stage["rollouts"], color="#000000", alpha=0.06, lw=0)
    ax.plot(xs, [100 * e["mean_at_k"] for e in run.evals], "o", color=colour, ms=3, label="at evaluation")
    ax.plot(*run.best_so_far(), "-", color=colour, drawstyle="steps-post", label="best so far")
    ax.set_xlabel("rollouts")
    ax.set_ylabel(accuracy_label(run.k))
    ax.set_title(f"{run.domain}: {METHOD_LABELS.get(run.method, run.method)} ({run.name})\ngrey: harness stages")
    ax.legend(frameon=False, fontsize=PAPER_STYLE["legend.fontsize"])
    return fig


# -- main comparison (notebook 03) -----------------------------------------------------
def accuracy_curve(runs: list[RunSummary], best_so_far: bool = False,
                   n_resamples: int = FIGURE_RESAMPLES) -> tuple[list[int], list[Interval]]:
    """One method's curve over seeds: at every rollout count where any seed evaluated, the
    mean over seeds × test problems of each seed's evaluation in effect there (its latest;
    with `best_so_far`, its best so far, which selects on test), with its 95 % interval.
    A seed that ended earlier keeps its last value."""
    xs = sorted({int(e["rollouts"]) for run in runs for e in run.evals})
    curve = []
    for x in xs:
        per_seed = []
        for run in runs:
            seen = [e for e in run.evals if int(e["rollouts"]) <= x]
            if seen:
                chosen = max(seen, key=lambda e: (e["mean_at_k"], -e["rollouts"])) if best_so_far else seen[-1]
                per_seed.append(list(run.problem_scores(chosen).values()))
        curve.append(seed_interval(per_seed, n_resamples=n_resamples, bounds=(0.0, 1.0)))
    return xs, curve


def _known(value: Interval | None) -> Interval:
    """An interval over a group the caller knows is not empty."""
    if value is None:
        raise ValueError("no runs to summarise")
    return value


def _controls(ax: Any, runs: list[RunSummary], floor: Any = None) -> None:
    """Dashed: h0 with the initial weights (mean over seeds); dotted: the floor, if given."""
    first = initial_runs(runs).get(runs[0].domain, [])
    if first:
        h0 = _known(interval(first, "initial", n_resamples=FIGURE_RESAMPLES))
        ax.axhline(100 * h0.mean, ls="--", lw=0.8, color=CONTROL_COLOUR, label=H0_LABEL)
    if floor is not None:
        value = floor_interval(floor, FIGURE_RESAMPLES)
        if value is not None:
            ax.axhline(100 * value.mean, ls=":", lw=0.8, color=CONTROL_COLOUR, label=FLOOR_LABEL)


# Figure 2's panels: WHALE beside one family of comparisons each, so no panel overlays seven bands
METHOD_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vs single levers", ("whale", "weight_only", "harness_only")),
    ("vs prompt-only", ("whale", "fst")),
    ("vs schedules", ("whale", "stagewise", "stagewise_reverse", "adaptive")),
)


def _groups(runs: list[RunSummary]) -> list[tuple[str, tuple[str, ...]]]:
    """The method groups with a run beside WHALE's (the first group when there is none)."""
    present = {r.method for r in runs}
    shown = [g for g in METHOD_GROUPS if any(m in present for m in g[1][1:])]
    grouped = {m for _, methods in METHOD_GROUPS for m in methods}
    others = tuple(sorted(present - grouped))
    if others:  # a method added to the registry but to no group still gets drawn
        shown.append(("other methods", ("whale", *others)))
    return shown or [METHOD_GROUPS[0]]


@paper_style
def accuracy_curve_figure(runs: list[RunSummary], best_so_far: bool = False,
                         floors: dict[str, Any] | None = None) -> Figure:
    """Figure 2 as small multiples: a row per domain, a panel per method group (WHALE beside the
    single levers, beside prompt-only, beside the schedules), test mean@k at each evaluation
    against cumulative rollouts: the mean over seeds with its 95 % t-interval band over the
    seed means; h0 with the initial weights dashed, the floor dotted. `best_so_far` draws the
    paper's best-so-far curve instead, which selects on test (and says so)."""
    require(runs, "Figure 2")
    domains = _by_domain(runs)
    groups = _groups(runs)
    fig, axes = figure(len(domains) * len(groups), ncols=len(groups), height=2.0, sharey=False)
    panels = iter(axes)
    for domain, domain_runs in domains.items():
        for column, (title, methods) in enumerate(groups):
            ax = next(panels)
            for method in methods:
                group = [r for r in domain_runs if r.method == method]
                if not group:
                    continue
                xs, curve = accuracy_curve(group, best_so_far)
                colour = method_colour(method)
                ax.plot(xs, [100 * c.mean for c in curve], drawstyle="steps-post", marker="o", ms=2, color=colour,
                        label=METHOD_LABELS.get(method, method))
                ax.fill_between(xs, [100 * c.low for c in curve], [100 * c.high for c in curve], step="post",
                                color=colour, alpha=0.15, lw=0)
            _controls(ax, domain_runs, (floors or {}).get(domain))
            ax.set_title(f"{domain}: {title}" + _not_run_note(runs, domain_runs, methods))
            ax.set_xlabel("rollouts")
            if column == 0:  # one label a row: the panels of a row share its quantity (the title says which)
                ax.set_ylabel("best so far (%)" if best_so_far else accuracy_label(domain_runs[0].k))
    what = ("best so far over evaluations (selected on test)" if best_so_far
            else "at each evaluation (last: after the whole budget)")
    fig.suptitle(f"test {curve_k(runs)} {what}; mean over seeds, band: 95 % t-interval over the seed means\n"
                 f"{conditions_caption(runs)}", fontsize=PAPER_STYLE["axes.titlesize"] - 1)
    legend(fig, axes)
    return fig


def best_so_far_figure(runs: list[RunSummary], floors: dict[str, Any] | None = None) -> Figure:
    """The paper's Figure 2 (best-so-far, which selects on test), labelled as such."""
    return accuracy_curve_figure(runs, best_so_far=True, floors=floors)


@paper_style
def accuracy_bars_figure(runs: list[RunSummary], point: str = "final", floors: dict[str, Any] | None = None) -> Figure:
    """Figure 1b: test mean@k at `point` (final | selected | best) per method and domain as
    grouped bars: the mean over seeds with its 95 % interval (error bar), each seed a dot,
    a method without a finished run marked "no run" (never a bar of 0); h0 with the initial
    weights as a dashed segment over each domain (the floor dotted, when given)."""
    require(runs, "Figure 1b")
    groups = _by_domain(runs)
    methods = [m for m in METHOD_ORDER if any(r.method == m for r in runs)]
    fig, (ax,) = figure(1, PAGE_WIDTH, 2.6)
    width = 0.8 / len(methods)
    hatched = False
    for i, (domain, domain_runs) in enumerate(groups.items()):
        for j, method in enumerate(methods):
            x = i + (j - (len(methods) - 1) / 2) * width
            group = [r for r in domain_runs if r.method == method]
            value = interval(group, point, n_resamples=FIGURE_RESAMPLES)
            if value is None:  # hatched over the whole height, so it cannot pass for a bar of 0
                ax.axvspan(x - width / 2, x + width / 2, fill=False, hatch="////", edgecolor=ABSENT_COLOUR, lw=0,
                           label=NOT_RUN)
                ax.text(x, 0.5, NOT_RUN, rotation=90, ha="center", va="center", fontsize=5, color=CONTROL_COLOUR,
                        transform=ax.get_xaxis_transform(), backgroundcolor="white")
                hatched = True
                continue
            ax.bar(x, 100 * value.mean, width, color=method_colour(method),
                   label=METHOD_LABELS.get(method, method),
                   yerr=[[100 * max(0.0, value.mean - value.low)], [100 * max(0.0, value.high - value.mean)]],
                   error_kw={"elinewidth": 0.7, "capsize": 1.5})
            ax.plot([x] * len(group), [100 * r.point(point)["mean_at_k"] for r in group], ".", color="black", ms=2)
        first = initial_runs(domain_runs)[domain]
        h0 = _known(interval(first, "initial", n_resamples=FIGURE_RESAMPLES))
        ax.plot([i - 0.45, i + 0.45], [100 * h0.mean] * 2, "--", color=CONTROL_COLOUR, lw=0.9, label=H0_LABEL)
        floor = floor_interval((floors or {}).get(domain), FIGURE_RESAMPLES)
        if floor is not None:
            ax.plot([i - 0.45, i + 0.45], [100 * floor.mean] * 2, ":", color=CONTROL_COLOUR, lw=0.9,
                    label=FLOOR_LABEL)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_xlabel("domain")
    k = point_k(runs, point)
    ax.set_ylabel(accuracy_label(k))
    ax.set_title(POINT_LABELS[point].format(k=k) + "\nbars: mean over seeds, error bars: 95 % t-interval over seeds, "
                 "dots: seeds" + (f", hatched: {NOT_RUN}" if hatched else ""))
    fig.suptitle(conditions_caption(runs), fontsize=6.5, color=CONTROL_COLOUR)
    legend(fig, [ax])
    return fig


def best_accuracy_figure(runs: list[RunSummary], floors: dict[str, Any] | None = None) -> Figure:
    """The paper's Figure 1b (best over evaluations, which selects on test), labelled as such."""
    return accuracy_bars_figure(runs, "best", floors)


# -- schedule grid (notebook 05) -------------------------------------------------------
def schedule_styles(labels: list[str]) -> dict[str, tuple[Any, str, Any]]:
    """label -> (colour, marker, dash): each fixed schedule its own (SCHEDULE_STYLES, in
    order), other methods (stagewise) in their own colour with a solid line and no marker."""
    fixed = [lb for lb in labels if lb.startswith("(E=")]
    styles: dict[str, tuple[Any, str, Any]] = {
        lb: SCHEDULE_STYLES[i % len(SCHEDULE_STYLES)] for i, lb in enumerate(fixed)}
    for method, label in METHOD_LABELS.items():
        if label in labels:
            styles[label] = (method_colour(method), "", "-")
    return styles


def schedule_colours(labels: list[str]) -> dict[str, Any]:
    """label -> its colour in `schedule_styles`."""
    return {label: style[0] for label, style in schedule_styles(labels).items()}


@paper_style
def schedule_grid_figure(runs: list[RunSummary], floors: dict[str, Any] | None = None) -> Figure:
    """Figure 4: per schedule, test mean@k at each evaluation against rollouts (mean over
    seeds; left) and the final test mean@k with its 95 % interval (bars) beside the best
    over evaluations (diamonds, selected on test; right); h0 dashed in both, the domain's
    floor (chess: random legal moves) dotted in both when given."""
    require(runs, "Figure 4")
    labels = list(dict.fromkeys(schedule_label(r) for r in runs))
    styles = schedule_styles(labels)
    colours = {label: style[0] for label, style in styles.items()}
    fig, (left, right) = figure(2, PAGE_WIDTH, 2.6)
    for label in labels:
        xs, curve = accuracy_curve([r for r in runs if schedule_label(r) == label])
        colour, marker, dash = styles[label]
        left.plot(xs, [100 * c.mean for c in curve], drawstyle="steps-post", color=colour, label=label,
                  marker=marker or None, ms=3, linestyle=dash)
    floor = (floors or {}).get(runs[0].domain)
    _controls(left, runs, floor)
    left.set_xlabel("rollouts")
    left.set_ylabel(accuracy_label(runs[0].k))
    left.set_title(f"{runs[0].domain}: test {curve_k(runs)} at each evaluation\n"
                   "(mean over seeds; the intervals are the bars')")
    for i, label in enumerate(labels):
        group = [r for r in runs if schedule_label(r) == label]
        final = _known(interval(group, "final", n_resamples=FIGURE_RESAMPLES))
        best = _known(interval(group, "best", n_resamples=FIGURE_RESAMPLES))
        right.bar(i, 100 * final.mean, color=colours[label],
                  yerr=[[100 * max(0.0, final.mean - final.low)], [100 * max(0.0, final.high - final.mean)]],
                  error_kw={"elinewidth": 0.7, "capsize": 1.5})
        right.plot(i, 100 * best.mean, "D", color="black", ms=3, label="best over evaluations (selected on test)")
        right.plot([i] * len(group), [100 * r.final["mean_at_k"] for r in group], ".", color="black", ms=2)
        marker = styles[label][1]
        if marker:  # the curve's marker under its bar, so the legend's key reads on both panels
            right.plot(i, 0, marker, color=colours[label], ms=4, clip_on=False, zorder=5)
    h0 = _known(interval(initial_runs(runs)[runs[0].domain], "initial", n_resamples=FIGURE_RESAMPLES))
    right.axhline(100 * h0.mean, ls="--", lw=0.8, color=CONTROL_COLOUR)
    floor_value = floor_interval(floor, FIGURE_RESAMPLES) if floor is not None else None
    if floor_value is not None:
        right.axhline(100 * floor_value.mean, ls=":", lw=0.8, color=CONTROL_COLOUR)
    right.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    right.set_ylabel(accuracy_label(runs[0].k))
    right.set_title("bars: final (after the whole budget), 95 % t-interval, dots: seeds")
    fig.suptitle(conditions_caption(runs), fontsize=6.5, color=CONTROL_COLOUR)
    legend(fig, [left, right])
    return fig


# -- adaptive schedule (notebook 06) ---------------------------------------------------
def adaptive_cycles(run: RunSummary) -> list[dict[str, Any]]:
    """Per cycle (one weight stage + the harness stage after it): epochs trained and
    search iterations run, from the run's stage_end and rsft_batch events."""
    n_train = max(1, int(run.config.get("n_train", 1)))
    per_problem = max(1, int(run.config.get("rsft", {}).get("samples_per_problem", 1)))
    cycles: list[dict[str, Any]] = []
    for stage in run.of("stage_end"):
        start = stage["rollouts"] - stage["stage_rollouts"]
        if stage["kind"] == "weight" or not cycles:
            cycles.append({"cycle": len(cycles) + 1, "epochs": 0.0, "iterations": 0, "rollouts": start})
        if stage["kind"] == "weight":
            sampled = sum(b["sampled"] for b in run.of("rsft_batch") if start < b["rollouts"] <= stage["rollouts"])
            cycles[-1]["epochs"] = sampled / per_problem / n_train
        else:
            cycles[-1]["iterations"] = int(stage["steps"])
    return cycles


@paper_style
def adaptive_figure(runs: list[RunSummary]) -> Figure:
    """Figure 6: per cycle, epochs of RSFT (bars, left axis) and search iterations
    (points, right axis); dashed lines at the adaptive rule's minimum stage lengths."""
    require(runs, "Figure 6")
    fig, axes = figure(len(runs), ncols=min(3, len(runs)))
    colour = method_colour("adaptive")
    twins: list[Any] = []
    for ax, run in zip(axes, runs):
        cycles = adaptive_cycles(run)
        adaptive = run.config.get("adaptive", {})
        rsft = run.config.get("rsft", {})
        n_train, batch = max(1, run.config.get("n_train", 1)), rsft.get("batch_problems", 1)
        min_batches = adaptive.get("min_weight_batches", 1)  # runs made before min_weight_epochs existed
        if "min_weight_epochs" in adaptive:  # the rule's minimum, in whole batches as the driver runs it
            min_batches = AdaptiveConfig().weight_batches(adaptive["min_weight_epochs"], n_train, batch)
        min_epochs = min_batches * batch / n_train
        xs = [c["cycle"] for c in cycles]
        ax.bar(xs, [c["epochs"] for c in cycles], 0.6, color=colour, label="RSFT epochs (bars)")
        ax.axhline(min_epochs, ls="--", color=colour, lw=0.9, label="minimum weight stage")
        ax.set_xlabel("cycle")
        ax.set_ylabel("epochs per weight stage")
        ax.set_title(f"{run.domain} ({run.name})")
        ax.set_xticks(xs)
        twin = ax.twinx()
        twin.spines["right"].set_visible(True)
        twin.plot(xs, [c["iterations"] for c in cycles], "o", color="#d55e00", ms=4, label="search iterations (points)")
        twin.axhline(adaptive.get("min_search_iterations", 1), ls="--", color="#d55e00", lw=0.9,
                     label="minimum harness stage")
        twin.set_ylabel("search iterations per harness stage")
        twin.set_ylim(0, max([c["iterations"] for c in cycles] + [adaptive.get("min_search_iterations", 1)]) + 1)
        ax.set_ylim(0, max([c["epochs"] for c in cycles] + [min_epochs]) * 1.25)
        twins.append(twin)
    legend(fig, axes[:1] + twins[:1])
    return fig


# -- harness archive (notebook 07) -----------------------------------------------------
def lineage_layout(parents: dict[str, str | None]) -> dict[str, tuple[float, float]]:
    """(x = generation, y = slot) per candidate: leaves get consecutive slots in archive
    order and a parent sits at the mean of its children, so edges never cross."""
    children: dict[str | None, list[str]] = {}
    for node, parent in parents.items():
        children.setdefault(parent if parent in parents else None, []).append(node)
    position: dict[str, tuple[float, float]] = {}
    next_slot = [0.0]

    def place(node: str, depth: int) -> float:
        kids = children.get(node, [])
        ys = [place(kid, depth + 1) for kid in kids]
        y = sum(ys) / len(ys) if ys else next_slot[0]
        if not ys:
            next_slot[0] += 1
        position[node] = (float(depth), y)
        return y

    for root in children.get(None, []):
        place(root, 0)
    return position


@paper_style
def lineage_figure(archive: Archive, accepted_id: str | None = None, title: str = "") -> Figure:
    """The archive as a tree: parent → child, each candidate coloured by its search
    score at the newest weights version it was scored at (grey: never scored), the path
    from the seed to the accepted candidate drawn thick."""
    entries = archive.entries()
    if not entries:
        raise ValueError(f"archive {archive.root} is empty")
    parents = {e.id: (e.parent_ids[0] if e.parent_ids else None) for e in entries}
    position = lineage_layout(parents)
    accepted_id = accepted_id or archive.accepted()
    path: set[str] = set()
    node: str | None = accepted_id
    while node is not None and node not in path:
        path.add(node)
        node = parents.get(node)
    height = max(2.0, 0.22 * (1 + max(y for _, y in position.values())))
    fig, (ax,) = figure(1, COLUMN_WIDTH * 1.4, min(height, 9.0))
    for child, parent in parents.items():
        if parent in position:
            on_path = child in path and parent in path
            (x0, y0), (x1, y1) = position[parent], position[child]
            ax.plot([x0, x1], [y0, y1], "-", color="#d55e00" if on_path else "#bbbbbb", lw=2.2 if on_path else 0.7,
                    zorder=1)
    cmap = plt.get_cmap("viridis")
    scored = {e.id: 100 * e.scores[max(e.scores)]["score"] for e in entries if e.scores}
    xs, ys, cs = zip(*[(*position[i], s) for i, s in scored.items()]) if scored else ((), (), ())
    low, high = fitted_range(list(cs))
    points = ax.scatter(xs, ys, c=cs, cmap=cmap, vmin=low, vmax=high, s=28, zorder=2, edgecolors="black",
                        linewidths=[1.2 if i in path else 0.2 for i in scored])
    unscored = [position[e.id] for e in entries if not e.scores]
    if unscored:
        ax.scatter(*zip(*unscored), color="#dddddd", s=18, zorder=2, edgecolors="#999999", linewidths=0.3,
                   label="never scored (invalid / failed)")
        ax.legend(frameon=False, fontsize=6, loc="upper left")
    ax.annotate("accepted", position[accepted_id], xytext=(4, 4), textcoords="offset points", fontsize=6)
    fig.colorbar(points, ax=ax, label="search-split score (%)")
    ax.set_xlabel("generation (proposals from the seed h0)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.set_title(title or f"harness lineage ({len(entries)} candidates; accepted path thick)")
    return fig


def fitted_range(values: list[float], step: float = 5.0) -> tuple[float, float]:
    """A colour scale's (low, high) fitted to the data: the values' range widened to
    multiples of `step` (a single value gets one step around it), never beyond 0–100."""
    if not values:
        return 0.0, 100.0
    low = step * math.floor(min(values) / step)
    high = step * math.ceil(max(values) / step)
    if high - low < step:
        low, high = low - step / 2, high + step / 2
    return max(0.0, low), min(100.0, max(high, low + step))
