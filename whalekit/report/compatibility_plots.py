"""The θ×h compatibility heatmaps (whalekit.repro.compatibility): rows the run's weights θ_i in
stage order, columns its accepted harnesses h_j, each cell mean@k on the analysis split; the
cell of each harness with the weights it was searched under is outlined, so conditional
over-optimisation reads as an outlined cell that beats the rest of its column's gain. The
conditions (model, proposer, split, k, CPU kind) are in the title, since the reading is about them.

    fig = compatibility_figure([load_matrix(p) for p in sorted(folder.glob("*.json"))])
    save_figure(fig, "figures/cpu-v3/fig_compatibility_math")
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from whalekit.report.compatibility import Matrix
from whalekit.report.plot_style import COLUMN_WIDTH, PAGE_WIDTH, figure, paper_style
from whalekit.run.methods import METHOD_LABELS


def _panel(ax: Any, matrix: Matrix, vmax: float) -> Any:
    rows, cols = [w.label for w in matrix.weights], [h.label for h in matrix.harnesses]
    values = [[100 * matrix.score(r, c) for c in cols] for r in rows]
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                    color="white" if value < 0.6 * vmax else "black")
    for j, h in enumerate(matrix.harnesses):  # the harness with the weights it was searched under
        if h.partner in rows:
            ax.add_patch(Rectangle((j - 0.5, rows.index(h.partner) - 0.5), 1, 1, fill=False, edgecolor="#EE7733",
                                   linewidth=1.6))
    ax.set_xticks(range(len(cols)), [f"{c}\n" + (f"s{h.stage}" if h.stage is not None else "start")
                                     for c, h in zip(cols, matrix.harnesses)])
    ax.set_yticks(range(len(rows)), [f"{r} " + (f"s{w.stage}" if w.stage is not None else "start")
                                     for r, w in zip(rows, matrix.weights)])
    ax.set_xlabel("accepted harness (sN: after stage N)")
    ax.set_ylabel("weights (sN: after stage N)")
    ax.set_title(f"{METHOD_LABELS.get(matrix.method, matrix.method)}, seed {matrix.seed}")
    ax.spines[:].set_visible(False)
    return image


@paper_style
def compatibility_figure(matrices: list[Matrix]) -> Figure:
    """One heatmap per run (one domain's), in the order given, on a shared colour scale."""
    if not matrices:
        raise ValueError("no θ×h matrix to draw: score a run with python -m whalekit.repro.compatibility first")
    vmax = max(100.0 * max(c["mean"] for c in m.cells.values()) for m in matrices)
    vmax = max(10.0, min(100.0, 10 * (int(vmax) // 10 + 1)))
    width = min(PAGE_WIDTH, max(COLUMN_WIDTH, 2.6 * len(matrices)))
    fig, axes = figure(len(matrices), width=width, height=2.6)
    image = None
    for ax, matrix in zip(axes, matrices):
        image = _panel(ax, matrix, vmax)
    first = matrices[0]
    c = first.conditions
    fig.suptitle(f"θ×h compatibility, {first.domain}: mean@{first.k} on {first.n_problems} {c.get('split', 'analysis')}"
                 f" problems (not the test split); {c.get('model')}, proposer {c.get('proposer')}, "
                 f"{c.get('cpu_kind')}\noutlined: each harness with the weights it was searched under", fontsize=7)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.8, pad=0.02)
        bar.set_label("accuracy (%)")
    return fig
