"""The θ×h compatibility matrix as data (scored by whalekit.repro.compatibility): its rows (the
run's weights θ_i), columns (its accepted harnesses h_j), cells (mean@k on a split that is not
test, with each problem's mean for paired comparisons) and the reading the design asks of it:
does a harness fit the weights it was searched under best, and weights the harness they were
trained with (conditional over-optimisation).

    matrix = load_matrix("results/cpu-v3/compatibility/math/whale-0.6,6-s0.json")
    reading(matrix)["harness_gains"]["h1"]["gain_under_own_weights"]
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any


@dataclass(frozen=True)
class Agent:
    """One row (weights) or column (harness) of the matrix: the stage that produced it."""

    label: str  # θ0, θ1, ... / h0, h1, ...
    stage: int | None  # the run's stage index that ended with it (None: the start)
    ident: str  # the checkpoint folder (weights) or harness id
    partner: str  # the other side current when it was made: the harness a weight stage trained with,
    #               the weights a harness stage searched under (θ/h label)


@dataclass
class Matrix:
    run: str
    domain: str
    method: str
    seed: int
    k: int
    n_problems: int
    weights: list[Agent]
    harnesses: list[Agent]
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)  # "θi|hj" -> {mean, per_problem, wall_s}
    conditions: dict[str, Any] = field(default_factory=dict)

    def score(self, theta: str, h: str) -> float:
        return float(self.cells[f"{theta}|{h}"]["mean"])

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "reading": reading(self)}


def reading(matrix: Matrix) -> dict[str, Any]:
    """What the matrix says, in numbers: each row's best harness, each column's best weights,
    for each harness found by the search (h1...) its gain over its parent column under the
    weights it was searched under against its gain under the other weights, and for each
    trained θ its gain over the previous row under the harness it trained with against the
    others (conditional over-optimisation: the first of each pair larger)."""
    rows = [w.label for w in matrix.weights]
    cols = [h.label for h in matrix.harnesses]
    out: dict[str, Any] = {
        "best_harness_per_weights": {r: max(cols, key=lambda c: matrix.score(r, c)) for r in rows},
        "best_weights_per_harness": {c: max(rows, key=lambda r: matrix.score(r, c)) for c in cols},
        "harness_gains": {},
    }
    for j, h in enumerate(matrix.harnesses[1:], start=1):
        parent = cols[j - 1]
        gains = {r: matrix.score(r, h.label) - matrix.score(r, parent) for r in rows}
        others = [g for r, g in gains.items() if r != h.partner]
        out["harness_gains"][h.label] = {
            "over": parent, "searched_under": h.partner, "gain_under_own_weights": gains[h.partner],
            "mean_gain_under_other_weights": mean(others) if others else None, "by_weights": gains}
    out["weight_gains"] = {}
    for i, w in enumerate(matrix.weights[1:], start=1):
        before = rows[i - 1]
        gains = {c: matrix.score(w.label, c) - matrix.score(before, c) for c in cols}
        others = [g for c, g in gains.items() if c != w.partner]
        out["weight_gains"][w.label] = {
            "over": before, "trained_with": w.partner, "gain_under_own_harness": gains[w.partner],
            "mean_gain_under_other_harnesses": mean(others) if others else None, "by_harness": gains}
    return out


def load_matrix(path: Path) -> Matrix:
    """A matrix written by `score_matrix`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    data.pop("reading", None)
    data["weights"] = [Agent(**a) for a in data["weights"]]
    data["harnesses"] = [Agent(**a) for a in data["harnesses"]]
    return Matrix(**data)
