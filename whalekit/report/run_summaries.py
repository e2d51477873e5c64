"""Find and read finished run directories (or the committed records of whalekit.records.results,
read the same way) as `RunSummary`s: the one place that decides which runs a table or figure
is about.

Why here and not in the notebooks or in each table: the same selection rule (which run is
"the" WHALE run of a domain, which are the schedule-grid runs) must hold in every table and
figure, and every set of runs read here was made by one code version (`find_runs` checks).

    runs = main_runs("results", "cpu")                 # the main comparison: default schedules
    grid = grid_runs("results", "cpu")                 # the schedule grid and stagewise
    run = load_run("runs/cpu/toy/whale-0.5,2-s0")      # one run directory
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.infra.runs import RunDir, read_jsonl_records
from whalekit.presets import load_preset
from whalekit.records.results import check_same_code
from whalekit.run.driver import resolve_config
from whalekit.run.methods import METHOD_ORDER, SEARCH_METHODS
from whalekit.run.schedules import parse_schedule

DOMAIN_ORDER = ("chess", "math", "searchqa", "toy")
# The three numbers of a run (`RunSummary.point`); the words beside each are tables.POINT_LABELS.
POINTS = ("final", "selected", "best")


@dataclass
class RunSummary:
    """One run directory's test evaluations and end record, as plots and tables need them."""

    path: Path
    config: dict[str, Any]
    evals: list[dict[str, Any]]  # test_eval events, in order
    events: list[dict[str, Any]] = field(repr=False, default_factory=list)  # every event
    _problem_cache: dict[tuple[int, str | None], dict[str, float]] = field(repr=False, default_factory=dict)

    @property
    def domain(self) -> str:
        return str(self.config["domain"])

    @property
    def method(self) -> str:
        return str(self.config["method"])

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def schedule(self) -> tuple[float, int]:
        epochs, iterations = self.config["schedule"]
        return float(epochs), int(iterations)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def k(self) -> int:
        return int(self.evals[0]["k"]) if self.evals else int(self.config.get("eval_k", 8))

    @property
    def end(self) -> dict[str, Any] | None:
        ends = [e for e in self.events if e["event"] == "run_end"]
        return ends[-1] if ends else None

    @property
    def best(self) -> dict[str, Any]:
        """The test evaluation with the highest mean@k (the earliest one on ties): the
        paper's number, which selects on the test set."""
        if not self.evals:
            raise ValueError(f"{self.path}: run has no test_eval event")
        return max(self.evals, key=lambda e: (e["mean_at_k"], -e["rollouts"]))

    @property
    def final(self) -> dict[str, Any]:
        """The last test evaluation: after the whole budget, the headline number."""
        if not self.evals:
            raise ValueError(f"{self.path}: run has no test_eval event")
        return self.evals[-1]

    @property
    def initial(self) -> dict[str, Any]:
        """The first test evaluation: h0 with the initial weights (the no-optimisation control)."""
        if not self.evals:
            raise ValueError(f"{self.path}: run has no test_eval event")
        return self.evals[0]

    @property
    def selected(self) -> dict[str, Any]:
        """The test evaluation the run's own training signal selects (see `selection_signals`):
        the highest signal, the latest on ties; the final one when no evaluation has a signal."""
        signals = self.selection_signals()
        known = [(signal, i) for i, signal in enumerate(signals) if signal is not None]
        return self.evals[max(known)[1]] if known else self.final

    def point(self, which: str) -> dict[str, Any]:
        """One of POINTS: 'final', 'selected', 'best' (or 'initial')."""
        if which not in (*POINTS, "initial"):
            raise ValueError(f"unknown point {which!r}; one of {', '.join(POINTS)} or 'initial'")
        return getattr(self, which)

    def selection_signals(self) -> list[float | None]:
        """Per test evaluation, the signal the method itself optimises, measured without
        test data: for methods that search harnesses, the search-split score of the
        evaluated harness at the evaluated weights version (from the run's archive; the
        harness's newest earlier score when the weights changed after it was last scored);
        for weights-only training, the sliding-window training reward of the last RSFT
        batch before the evaluation. None where no signal exists yet."""
        if self.method in SEARCH_METHODS:
            scores = self._search_scores()
            out: list[float | None] = []
            for e in self.evals:
                history = scores.get(str(e.get("accepted_id")), {})
                versions = [v for v in history if v <= int(e.get("weights_version", 0))]
                out.append(history[max(versions)] if versions else None)
            return out
        out, reward = [], None
        for e in self.events:
            if e["event"] == "rsft_batch":
                reward = e.get("reward_window_mean", e.get("reward"))
            elif e["event"] == "test_eval":
                out.append(None if reward is None else float(reward))
        return out

    def _search_scores(self) -> dict[str, dict[int, float]]:
        """candidate id -> weights version -> search-split score, from the archive's files
        (read only), or from the search_iteration events when there is no archive."""
        scores: dict[str, dict[int, float]] = {}
        root = self.path / "archive" / "candidates"
        for path in sorted(root.glob("*/scores.json")) if root.exists() else []:
            data = json.loads(path.read_text())
            scores[path.parent.name] = {int(v): float(r["score"]) for v, r in data.items()}
        if not scores:
            for e in self.of("search_iteration"):
                if e.get("accepted_score") is not None:
                    scores.setdefault(str(e["accepted_id"]), {})[int(e.get("weights_version", 0))] = \
                        float(e["accepted_score"])
        return scores

    def problem_scores(self, evaluation: dict[str, Any], subset: str | None = None) -> dict[str, float]:
        """task id -> fraction of its k test samples solved, at one test evaluation (from
        test/eval-NNN.jsonl); only the sub-dataset `subset` when given."""
        key = (int(evaluation["index"]), subset)
        if key not in self._problem_cache:
            path = self.path / "test" / f"eval-{int(evaluation['index']):03d}.jsonl"
            if not path.exists():
                raise ValueError(f"{path}: missing; per-problem test scores are needed for intervals")
            solved: dict[str, list[float]] = {}
            for record in read_jsonl_records(path):
                if subset is None or record.get("subset", "default") == subset:
                    solved.setdefault(str(record["task_id"]), []).append(float(bool(record["correct"])))
            self._problem_cache[key] = {task: sum(v) / len(v) for task, v in solved.items()}
        return self._problem_cache[key]

    @property
    def rollouts_consumed(self) -> int:
        end = self.end
        return int(end["rollouts"]) if end else int(max(e["rollouts"] for e in self.events))

    def best_so_far(self) -> tuple[list[int], list[float]]:
        """(cumulative rollouts, best test mean@k so far in %): the paper's Figure 2 curve."""
        xs, ys, best = [], [], -math.inf
        for e in self.evals:
            best = max(best, e["mean_at_k"])
            xs.append(int(e["rollouts"]))
            ys.append(100.0 * best)
        return xs, ys

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]


def load_run(path: str | Path) -> RunSummary:
    run = RunDir(path)
    if not run.config_path.exists():
        raise ValueError(f"{run.root}: not a run directory (no config.json)")
    events = run.events()
    return RunSummary(run.root, run.config(), [e for e in events if e["event"] == "test_eval"], events)


def find_runs(runs_root: str | Path, preset: str, domain: str | None = None, method: str | None = None,
              finished_only: bool = True, same_code: bool = True) -> list[RunSummary]:
    """Every run under runs_root/preset[/domain], optionally one method, in a stable order
    (runs_root: run directories, or the committed records of whalekit.records.results). With
    `same_code`, runs made by different code raise whalekit.records.results.MixedRecordsError."""
    base = Path(runs_root) / Path(preset).stem
    folders = sorted(base.glob(f"{domain or '*'}/*/config.json"))
    runs = []
    for config_path in folders:
        folder = config_path.parent
        if finished_only and not RunDir(folder).done:
            continue
        summary = load_run(folder)
        if method is None or summary.method == method:
            runs.append(summary)
    if same_code:
        check_same_code(runs)
    return sorted(runs, key=_sort_key)


def _sort_key(run: RunSummary) -> tuple[Any, ...]:
    method = METHOD_ORDER.index(run.method) if run.method in METHOD_ORDER else len(METHOD_ORDER)
    domain = DOMAIN_ORDER.index(run.domain) if run.domain in DOMAIN_ORDER else len(DOMAIN_ORDER)
    return domain, run.domain, method, run.schedule, run.seed


def default_run_name(preset: str, domain: str, method: str, seed: int) -> str:
    """The run name the preset's default schedule gives a method: the main comparison's run."""
    return resolve_config(preset, domain=domain, method=method, seed=seed).run_name


def main_runs(runs_root: str | Path, preset: str, domain: str | None = None) -> list[RunSummary]:
    """The runs of the main comparison: each method at the preset's default schedule (the
    schedule-grid runs of the same domain are left out), every seed found."""
    return [r for r in find_runs(runs_root, preset, domain)
            if r.name == default_run_name(preset, r.domain, r.method, r.seed)]


def grid_runs(runs_root: str | Path, preset: str) -> list[RunSummary]:
    """The schedule grid: WHALE at every schedule the preset's `grid` lists, plus stagewise,
    on the grid's domain."""
    grid = load_preset(preset).get("grid") or {}
    if "domain" not in grid:
        raise ValueError(f"preset {preset!r} has no 'grid' section with a domain")
    wanted = {parse_schedule(s) for s in grid.get("schedules", [])}
    runs = find_runs(runs_root, preset, grid["domain"])
    start = resolve_config(preset, domain=grid["domain"], method="whale").initial_harness
    # the zero-start runs (from the authors' faithful h0) are whale at a grid schedule too: not the grid's
    whale = [r for r in runs if r.method == "whale" and r.schedule in wanted
             and r.config.get("initial_harness", start) == start]
    stagewise = [r for r in main_runs(runs_root, preset, grid["domain"]) if r.method == "stagewise"]
    return sorted(whale, key=lambda r: (r.schedule, r.seed)) + stagewise


def point_k(runs: list[RunSummary], point: str) -> str:
    """Samples per test problem behind `point` over `runs`, for its label: "8", or "2/8" where
    the chosen evaluations differ (the best may be an intermediate, eval_k_intermediate one)."""
    return "/".join(str(k) for k in sorted({int(r.point(point).get("k", r.k)) for r in runs}))


def curve_k(runs: list[RunSummary]) -> str:
    """How a curve over every evaluation is measured, for its label: "mean@8", or "mean@8
    (mean@2 between the first and last evaluation)" where intermediate ones use fewer samples."""
    ends = sorted({int(e.get("k", r.k)) for r in runs if r.evals for e in (r.evals[0], r.evals[-1])})
    middle = sorted({int(e.get("k", r.k)) for r in runs for e in r.evals[1:-1]})
    text = "mean@" + "/".join(str(k) for k in ends or [8])
    if middle and middle != ends:
        text += " (mean@" + "/".join(str(k) for k in middle) + " between the first and last evaluation)"
    return text
