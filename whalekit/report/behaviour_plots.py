"""Figure 3, the bottleneck figure: each behaviour metric of the test evaluations
(turns, tool calls, format errors, ...) against rollouts, one line per method, with the
unit each kind of metric has in every domain.

Why its own module: a behaviour metric's unit is decided by the kind of flag behind it (a
yes/no flag is a rate in % of samples, a count a mean per sample), read from the runs'
trajectories; that rule and the figure drawn with it are one job, apart from the accuracy
figures of `whalekit.report.plots`.

    fig = bottleneck_figure([r for r in main_runs("runs", "cpu") if r.domain == "toy"])
"""

from __future__ import annotations

from matplotlib.figure import Figure

from whalekit.infra.runs import read_jsonl_records
from whalekit.report.plot_style import (
    FIGURE_RESAMPLES,
    PAPER_STYLE,
    figure,
    legend,
    method_colour,
    paper_style,
    require,
)
from whalekit.report.run_summaries import RunSummary
from whalekit.report.stats import Interval, seed_interval
from whalekit.run.methods import METHOD_LABELS, METHOD_ORDER


def behaviour_keys(runs: list[RunSummary]) -> list[str]:
    keys: list[str] = []
    for run in runs:
        for e in run.evals:
            keys.extend(k for k in e.get("behaviour", {}) if k not in keys)
    return keys


RATE_UNIT, COUNT_UNIT = "% of test samples", "mean per sample"
# Counts and scores of the built-in domains, for runs whose trajectories are not on disk
COUNT_METRICS = frozenset({"turns", "generated_tokens", "tool_calls", "tool_errors", "searches", "model_searches",
                           "documents_retrieved", "format_errors", "solver_moves_correct", "illegal_attempts",
                           "unreadable_attempts", "f1"})


def behaviour_units(runs: list[RunSummary]) -> dict[str, str]:
    """Per behaviour metric, its unit: a yes/no flag (every per-sample value a bool in the
    runs' test trajectories) is a rate, in % of test samples; a count (turns, tokens, tool
    calls) or a score is a mean per sample, whatever its values. Decided by the kind of
    flag, not by its values, so a metric has the same unit in every domain and figure.
    Runs without trajectories on disk fall back to COUNT_METRICS, then to "all values
    within 0–1 is a rate"."""
    kinds: dict[str, set[bool]] = {}
    for run in runs:
        for path in sorted((run.path / "test").glob("eval-*.jsonl"))[:1]:
            for record in read_jsonl_records(path):
                for key, value in record.get("flags", {}).items():
                    if isinstance(value, (bool, int, float)):
                        kinds.setdefault(key, set()).add(isinstance(value, bool))
    units = {}
    for metric in behaviour_keys(runs):
        if metric in kinds:
            units[metric] = RATE_UNIT if kinds[metric] == {True} else COUNT_UNIT
        elif metric in COUNT_METRICS:
            units[metric] = COUNT_UNIT
        else:
            values = [e["behaviour"][metric] for r in runs for e in r.evals if metric in e.get("behaviour", {})]
            units[metric] = RATE_UNIT if all(0.0 <= v <= 1.0 for v in values) else COUNT_UNIT
    return units


def behaviour_curve(runs: list[RunSummary], metric: str, rate: bool = False) -> tuple[list[int], list[Interval]]:
    """One method's behaviour metric over seeds, as `accuracy_curve` does for accuracy: at
    every rollout count where a seed evaluated, each seed's latest value, their mean and
    the 95 % t-interval over seed means (a point, not a band, with one seed), clipped to
    what the metric can be: [0, 1] for a `rate`, [0, ∞) for a count."""
    xs = sorted({int(e["rollouts"]) for run in runs for e in run.evals if metric in e.get("behaviour", {})})
    curve = []
    for x in xs:
        per_seed = []
        for run in runs:
            seen = [e for e in run.evals if int(e["rollouts"]) <= x and metric in e.get("behaviour", {})]
            if seen:
                per_seed.append([float(seen[-1]["behaviour"][metric])])
        curve.append(seed_interval(per_seed, n_resamples=FIGURE_RESAMPLES, bounds=(0.0, 1.0 if rate else float("inf"))))
    return xs, curve


@paper_style
def bottleneck_figure(runs: list[RunSummary], metrics: list[str] | None = None) -> Figure:
    """Figure 3 (one domain): each behaviour metric against rollouts, one line per method
    (the mean over seeds, with a 95 % band over seeds where there are several), a star at
    each run's best test accuracy. Units follow the kind of metric (`behaviour_units`):
    the panel's title names the metric, its y-axis the unit. A metric that is constant over
    every run and evaluation gets no panel; the suptitle lists it with its value."""
    require(runs, "Figure 3")
    metrics = metrics or behaviour_keys(runs)
    if not metrics:
        raise ValueError("Figure 3: the runs' test evaluations carry no behaviour metrics")
    units = behaviour_units(runs)
    scale = {m: 100.0 if units.get(m) == RATE_UNIT else 1.0 for m in metrics}
    values = {m: {e["behaviour"][m] for r in runs for e in r.evals if m in e.get("behaviour", {})} for m in metrics}
    constant = [m for m in metrics if len(values[m]) <= 1]
    drawn = [m for m in metrics if m not in constant] or metrics[:1]
    constant = [m for m in constant if m not in drawn]
    fig, axes = figure(len(drawn), ncols=min(3, len(drawn)))
    for ax, metric in zip(axes, drawn):
        for method in METHOD_ORDER + tuple(sorted({r.method for r in runs} - set(METHOD_ORDER))):
            group = [r for r in runs if r.method == method]
            xs, curve = behaviour_curve(group, metric, rate=units.get(metric) == RATE_UNIT)
            if not xs:
                continue
            colour = method_colour(method)
            ax.plot(xs, [scale[metric] * c.mean for c in curve], "-", color=colour,
                    label=METHOD_LABELS.get(method, method))
            if len(group) > 1:
                ax.fill_between(xs, [scale[metric] * c.low for c in curve], [scale[metric] * c.high for c in curve],
                                color=colour, alpha=0.15, lw=0)
            for run in group:
                best = run.best
                if metric in best.get("behaviour", {}):
                    ax.plot(best["rollouts"], scale[metric] * best["behaviour"][metric], "*", color=colour, ms=8,
                            markeredgecolor="black", markeredgewidth=0.4)
        ax.set_title(metric.replace("_", " "))
        ax.set_xlabel("rollouts")
        ax.set_ylabel(units.get(metric, COUNT_UNIT))
    seeds = max(len({r.seed for r in runs if r.method == m}) for m in {r.method for r in runs})
    title = f"{runs[0].domain}: behaviour on the test split (★ = each run's best test accuracy, selected on test)"
    if seeds > 1:
        title += "\nlines: mean over seeds, band: 95 % t-interval over the seed means"
    if constant:
        shown = [f"{m.replace('_', ' ')} = {_unit_value(next(iter(values[m])), units.get(m, COUNT_UNIT))}"
                 for m in constant]
        lines = [", ".join(shown[i:i + 3]) for i in range(0, len(shown), 3)]
        title += "\nconstant in every run, not drawn: " + ",\n".join(lines)
    fig.suptitle(title, fontsize=PAPER_STYLE["axes.titlesize"])
    legend(fig, axes)
    return fig


def _unit_value(value: float, unit: str) -> str:
    return f"{100 * value:g} %" if unit == RATE_UNIT else f"{value:g} per sample"
