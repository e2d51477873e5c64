"""The paper's look, shared by every figure module (`whalekit.report.plots`,
`whalekit.report.behaviour_plots`): one style, one size per column, one colour per method, the
panel grid and legend, the byte-stable PNG + PDF writer, and the check that no two texts
of a figure overlap.

Why one module: a figure that set its own fonts, sizes or colours would disagree with the
others in the paper; keeping them here makes every figure read the same, and the same
records give the same bytes wherever they are drawn.

    fig = accuracy_curve_figure(main_runs("runs", "cpu"))    # any figure of whalekit.report.plots
    save_figure(fig, "figures/fig2_test_accuracy")          # .png + .pdf, no dates inside
    assert overlapping_texts(fig) == []                      # what tests/test_plots.py checks
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from whalekit.report.run_summaries import RunSummary
from whalekit.run.methods import METHOD_COLOURS

PAPER_STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
               "xtick.labelsize": 7, "ytick.labelsize": 7, "lines.linewidth": 1.4, "axes.spines.top": False,
               "axes.spines.right": False, "savefig.dpi": 200, "figure.dpi": 100}
CONTROL_COLOUR = "#555555"  # h0 and the floor: not a method
ABSENT_COLOUR = "#bbbbbb"  # hatching where a run was never made
NOT_RUN = "not run"
FIGURE_RESAMPLES = 1000  # problem-bootstrap draws for a one-seed interval (tables use stats.N_RESAMPLES)
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PAGE_WIDTH = 7.0
PRINT_DPI = 200  # PNGs at print resolution: a 7-inch figure is 1,400 px wide, its 7-pt text legible
# Schedules of the grid: each its own colour-blind-safe colour (Paul Tol's "bright" and "muted"),
# marker and dash, so five of them can be told apart in print, in grey and on a projector
SCHEDULE_STYLES = (("#4477AA", "o", "-"), ("#228833", "s", "--"), ("#AA3377", "^", "-."), ("#CCBB44", "v", ":"),
                   ("#66CCEE", "D", (0, (5, 1, 1, 1))), ("#332288", "P", (0, (3, 1, 1, 1, 1, 1))),
                   ("#999933", "X", (0, (1, 1))))


def paper_style(draw: Callable[..., Figure]) -> Callable[..., Figure]:
    """Draw a figure under PAPER_STYLE (fonts, line widths, spines), whatever the
    notebook's own matplotlib settings are. The interactive setting survives: the first
    figure of a kernel resolves the inline backend, which turns interactive mode on, and
    rc_context would turn it off again on exit, so re-running a cell would show nothing."""

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        import matplotlib

        with plt.rc_context(PAPER_STYLE):  # type: ignore[arg-type]  # matplotlib types rc keys as Literals
            figure = draw(*args, **kwargs)
            interactive = matplotlib.is_interactive()
        matplotlib.interactive(interactive)
        return figure

    return wrapper


def method_colour(method: str) -> str:
    """A method's colour in every figure (black for a method the table does not know)."""
    return METHOD_COLOURS.get(method, "#000000")


def accuracy_label(k: int | str) -> str:
    """The accuracy axis's label, with its unit, the same in every figure."""
    return f"test mean@{k} (%)"


# No creation date or software version in the files: the same records give the same bytes
# (`make figures` on a fresh clone regenerates the committed figures exactly).
SAVE_METADATA = {".png": {"Software": None}, ".pdf": {"Creator": None, "Producer": None, "CreationDate": None}}


def save_figure(fig: Figure, stem: str | Path) -> list[Path]:
    """Write `stem`.png and `stem`.pdf (creating folders), byte for byte the same for the
    same figure; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.parent / f"{stem.name}{kind}" for kind in SAVE_METADATA]
    for path in paths:
        fig.savefig(path, bbox_inches="tight", dpi=PRINT_DPI, metadata=SAVE_METADATA[path.suffix])
    return paths


def figure(n_panels: int, width: float = PAGE_WIDTH, height: float = 2.2, ncols: int | None = None,
           sharey: bool = False) -> tuple[Figure, list[Any]]:
    """A grid of `n_panels` panels (`ncols` to a row) under constrained layout, so
    no two labels overlap; the unused cells of the last row are hidden."""
    ncols = ncols or n_panels
    nrows = -(-n_panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height * nrows), squeeze=False, sharey=sharey,
                             layout="constrained")
    flat = list(axes.flat)
    for extra in flat[n_panels:]:
        extra.set_visible(False)
    return fig, flat[:n_panels]


def legend(fig: Figure, axes: list[Any]) -> None:
    """One legend for the whole figure, each label once, below the panels."""
    handles, labels = {}, []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    if handles:  # below the panels, in the space constrained layout makes for it
        fig.legend([handles[lb] for lb in labels], labels, loc="outside lower center", ncol=min(4, len(labels)),
                   frameon=False, fontsize=PAPER_STYLE["legend.fontsize"])


def require(runs: list[RunSummary], what: str) -> None:
    """Refuse to draw a figure of no runs (an empty figure would pass for a result)."""
    if not runs:
        raise ValueError(f"{what}: no finished runs to plot")


def conditions_caption(runs: list[RunSummary]) -> str:
    """'conditions: model smollm2-135m; proposer reflective; budget 1,440 rollouts; seeds 0, 1, 2;
    CPU AMD EPYC, native bf16 (...)': what every figure's reading is about."""
    models = sorted({str(r.config.get("model")) for r in runs})
    proposers = sorted({str(r.config.get("proposer")) for r in runs if r.method != "weight_only"})
    budgets = sorted({int((r.config.get("budget") or {}).get("rollouts", 0)) for r in runs})
    seeds = sorted({r.seed for r in runs})
    cpus = sorted({str((r.config.get("provenance") or {}).get("cpu_kind") or "not recorded") for r in runs})
    return (f"conditions: model {', '.join(models)}; proposer {', '.join(proposers) or 'none'}; budget "
            f"{', '.join(f'{b:,}' for b in budgets)} rollouts; seeds {', '.join(map(str, seeds))}; "
            f"CPU {' + '.join(cpus)}; 95 % t-intervals over seeds")


# -- layout check ------------------------------------------------------------------------
def overlapping_texts(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of texts drawn on top of each other when `fig` is rendered (titles, labels,
    tick labels, legend entries, annotations): empty for a readable figure. Only the
    texts the renderer actually draws count (ticks outside the view are not drawn)."""
    from matplotlib.text import Text

    drawn: list[Text] = []
    original = Text.draw

    def record(self: Text, renderer: Any) -> None:
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)
        original(self, renderer)

    Text.draw = record  # type: ignore[method-assign, assignment]
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original  # type: ignore[method-assign]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [(t, t.get_window_extent(renderer)) for t in dict.fromkeys(drawn)]
    pairs = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            # 0.5 px of slack: touching is not overlapping
            if (min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0.5
                    and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0.5):
                pairs.append((a.get_text(), b.get_text()))
    return pairs
