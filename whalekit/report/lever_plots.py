"""Figure 3, drawn around the quantity its verdict uses: which lever moved the score.

Why a figure of its own: the paper's Figure 3 reads "harness-dominated" or "model-dominated"
per domain from harness-only − weight-only; the behaviour dashboard (`behaviour_plots`,
kept as a supplementary figure) never shows that difference. Left: harness-only −
weight-only per domain, the paired t-interval over seeds with each seed a dot (above 0: the
harness lever moved the score more). Right: within WHALE itself, the test change summed over
its weight stages and over its harness stages (`stage_effects`), so a reader sees how much
each lever contributed when both were on. The conditions (model, proposer, budget, seeds)
are in the caption, because the reading is about them, not about the domain.

    fig = lever_figure(main_runs("results", "cpu"))
    save_figure(fig, "figures/fig3_levers")
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from whalekit.report.plot_style import (
    CONTROL_COLOUR,
    PAGE_WIDTH,
    conditions_caption,
    figure,
    legend,
    method_colour,
    paper_style,
    require,
)
from whalekit.report.run_summaries import DOMAIN_ORDER, RunSummary
from whalekit.report.stage_effects import lever_totals
from whalekit.report.stats import Interval, paired_difference, seed_interval
from whalekit.report.tables import seed_scores
from whalekit.run.methods import METHOD_LABELS

LEVER_COLOURS = {"weight": "#4477AA", "harness": "#EE7733"}
LEVER_LABELS = {"weight": "weight stages (RSFT)", "harness": "harness stages (search)"}


def _domains(runs: list[RunSummary]) -> list[str]:
    found = {r.domain for r in runs}
    return [d for d in DOMAIN_ORDER if d in found] + sorted(found - set(DOMAIN_ORDER))


def _errorbar(ax: Any, x: float, value: Interval, colour: str, label: str | None = None, marker: str = "o") -> None:
    ax.errorbar([x], [100 * value.mean], yerr=[[100 * (value.mean - value.low)], [100 * (value.high - value.mean)]],
                fmt=marker, color=colour, ms=5, elinewidth=1.2, capsize=3, label=label, zorder=3)
    ax.plot([x + 0.12] * len(value.seed_values), [100 * v for v in value.seed_values], ".", color="black", ms=3,
            zorder=4, label="one seed")


@paper_style
def lever_figure(runs: list[RunSummary]) -> Figure:
    """Figure 3 (see the module docstring): the verdict's quantity per domain, and WHALE's
    own split of its test change between its two levers."""
    require(runs, "Figure 3")
    domains = _domains(runs)
    fig, (left, right) = figure(2, PAGE_WIDTH, 2.8)
    for i, domain in enumerate(domains):
        harness = [r for r in runs if r.domain == domain and r.method == "harness_only"]
        weights = [r for r in runs if r.domain == domain and r.method == "weight_only"]
        if harness and weights and set(seed_scores(harness)) & set(seed_scores(weights)):
            difference = paired_difference(seed_scores(harness), seed_scores(weights))
            _errorbar(left, i, difference, method_colour("harness_only"), "harness only − weights only")
        else:
            left.text(i, 0, "not run", ha="center", va="bottom", fontsize=7, color=CONTROL_COLOUR)
        whale = [r for r in runs if r.domain == domain and r.method == "whale"]
        for offset, kind in ((-0.18, "weight"), (0.18, "harness")):
            if whale:
                value = seed_interval([[lever_totals(r).get(kind, 0.0)] for r in whale])
                _errorbar(right, i + offset, value, LEVER_COLOURS[kind], f"{METHOD_LABELS['whale']}: "
                          f"{LEVER_LABELS[kind]}", marker="s" if kind == "weight" else "^")
    for ax in (left, right):
        ax.axhline(0, color=CONTROL_COLOUR, lw=0.8, ls="--")
        ax.set_xticks(range(len(domains)), domains)
        ax.set_xlim(-0.6, len(domains) - 0.4)
        ax.set_ylabel("change in test mean (points)")
    left.set_title("harness only − weights only, final\n(above 0: the harness lever moved the score more)")
    right.set_title(f"{METHOD_LABELS['whale']}: test change summed over its\nweight stages and its harness stages")
    legend(fig, [left, right])
    fig.suptitle(conditions_caption(runs), fontsize=6.5, color=CONTROL_COLOUR)
    return fig
