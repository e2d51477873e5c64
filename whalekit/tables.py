"""Read finished run directories back into numbers: the paper's tables (Markdown + CSV)
and the per-run summaries every figure in `whalekit.plots` draws from.

Why here and not in the notebooks: a figure or table must be rebuilt from `runs/` or from
the committed records in `results/` (whalekit.results: thin run directories, read the
same way) alone, never from a notebook's outputs, and the same selection rule (which run
is "the" WHALE run of a domain, which are the schedule-grid runs) must hold in every
figure. Every set of runs read here was made by one code version (`find_runs` checks).

    table = main_comparison("results", "cpu")         # Table 2: final test mean@k (%) ± interval
    save_table(table, "figures/table2_main")          # -> .md and .csv
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from whalekit.domains.base import get_domain
from whalekit.domains.chess.baselines import random_legal_move_score
from whalekit.methods import METHOD_LABELS, METHOD_ORDER, SEARCH_METHODS
from whalekit.presets import load_preset
from whalekit.results import check_same_code
from whalekit.runs import RunDir, read_jsonl_records
from whalekit.schedules import parse_schedule
from whalekit.stats import N_RESAMPLES, Interval, bootstrap_mean, paired_difference
from whalekit.whale import resolve_config

DOMAIN_ORDER = ("chess", "math", "searchqa", "toy")
# The three numbers of a run, each with the words every table and figure prints beside it.
POINTS = ("final", "selected", "best")
POINT_LABELS = {"final": "final test mean@{k} (%, after the whole budget)",
                "selected": "test mean@{k} (%) at the point the run's own signal selects (no test data)",
                "best": "best test mean@{k} (%) over evaluations (selected on test)",
                "initial": "test mean@{k} (%) of h0 with the initial weights"}
POINT_SHORT = {"final": "final", "selected": "selected by own signal", "best": "best (selected on test)",
               "initial": "initial"}
H0_LABEL = "h0, initial weights (control)"
FLOOR_LABEL = "random legal move (floor)"
ABSENT = "—"  # a cell with no finished run: absent, never 0


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
    (runs_root: run directories, or the committed records of whalekit.results). With
    `same_code`, runs made by different code raise whalekit.results.MixedRecordsError."""
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
    whale = [r for r in runs if r.method == "whale" and r.schedule in wanted]
    stagewise = [r for r in main_runs(runs_root, preset, grid["domain"]) if r.method == "stagewise"]
    return sorted(whale, key=lambda r: (r.schedule, r.seed)) + stagewise


def _mean_std(values: list[float]) -> str:
    """'41.2' for one seed, '41.2 ± 3.1' for several (sample std): for rollout counts."""
    if not values:
        return ABSENT
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.1f}"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.1f} ± {std:.1f}"


def seed_scores(runs: list[RunSummary], point: str = "final", subset: str | None = None) -> dict[int, dict[str, float]]:
    """seed -> task id -> score at each run's `point`: the input of every interval and pairing."""
    return {run.seed: run.problem_scores(run.point(point), subset) for run in runs}


def interval(runs: list[RunSummary], point: str = "final", subset: str | None = None,
             n_resamples: int = N_RESAMPLES) -> Interval | None:
    """Mean of `point` over the runs' seeds × test problems with its 95 % bootstrap interval
    (None when there are no runs: drawn as absent)."""
    scores = [s for s in seed_scores(runs, point, subset).values() if s]
    return bootstrap_mean([list(s.values()) for s in scores], n_resamples) if scores else None


def initial_runs(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """domain -> one run per seed whose first test evaluation stands for h0 with the initial
    weights (every run of a domain and seed starts from the same weights, harness and test set)."""
    out: dict[str, dict[int, RunSummary]] = {}
    for run in runs:
        out.setdefault(run.domain, {}).setdefault(run.seed, run)
    return {domain: list(by_seed.values()) for domain, by_seed in out.items()}


def floor_interval(floor: Any, n_resamples: int = N_RESAMPLES) -> Interval | None:
    """A precomputed floor (e.g. whalekit.domains.chess.baselines.random_legal_move_score):
    a fraction; an object with `per_task` (task id -> score) and `mean_at_k`; or a mapping
    seed -> such an object. Per-task scores get a bootstrap interval; a bare number none."""
    if floor is None:
        return None
    if isinstance(floor, (int, float)):
        return Interval(float(floor), float(floor), float(floor), 0, 0)
    per_seed = list(floor.values()) if isinstance(floor, dict) else [floor]
    tasks = [list(getattr(f, "per_task", {}).values()) for f in per_seed]
    if all(tasks):
        return bootstrap_mean(tasks, n_resamples)
    values = [float(f) if isinstance(f, (int, float)) else float(f.mean_at_k) for f in per_seed]
    mean = sum(values) / len(values)
    return Interval(mean, min(values), max(values), len(values), 0)


def floor_scores(runs: list[RunSummary], score: Callable[..., Any] | None = None) -> dict[str, dict[int, Any]]:
    """The chess random-legal-move floor on each seed's own test problems, for the `floors`
    argument of the tables: domain -> seed -> score(tasks, k=, seed=). `score` defaults to
    whalekit.domains.chess.baselines.random_legal_move_score (chess runs only)."""
    if score is None:
        score = random_legal_move_score
        runs = [r for r in runs if r.domain == "chess"]
    out: dict[str, dict[int, Any]] = {}
    for domain, seeds in initial_runs(runs).items():
        for run in seeds:
            c = run.config
            splits = get_domain(domain, **c.get("domain_options", {})).load_splits(
                n_train=c["n_train"], n_search=c["n_search"], n_test=c["n_test"], seed=run.seed,
                **c.get("split_options", {}))
            out.setdefault(domain, {})[run.seed] = score(splits.test, k=run.k, seed=run.seed)
    return out


def _format(value: Interval | None, signed: bool = False) -> str:
    if value is None:
        return ABSENT
    if value.n_problems == 0:  # a bare number: no data to resample
        return f"{100 * value.mean:{'+' if signed else ''}.1f} (no interval)"
    return value.format(signed=signed)


def _caption(point: str, k: int, what: str) -> str:
    return (f"{POINT_LABELS[point].format(k=k)} per method and {what}: mean over seeds × test problems "
            f"[95 % bootstrap interval], n = seeds; {ABSENT} = no finished run")


def main_comparison(runs_root: str | Path, preset: str, by_subset: bool = False,
                    domains: list[str] | None = None, point: str = "final",
                    floors: dict[str, Any] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """Table 2: test mean@k (%) at `point` (final | selected | best) per method (rows) and
    domain (columns), each cell the mean with its 95 % bootstrap interval over seeds × test
    problems; with `by_subset`, one column per domain/sub-dataset. Beside the methods: h0
    with the initial weights and, for domains in `floors` (see `floor_scores`), the floor."""
    runs = [r for r in main_runs(runs_root, preset) if domains is None or r.domain in domains]
    if not runs:
        raise ValueError(f"no finished runs under {Path(runs_root) / preset}")
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    subsets: dict[str, str | None] = {}
    for run in runs:
        names = sorted({s for e in run.evals for s in e.get("by_subset", {})}) if by_subset else [None]
        for subset in names:
            column = f"{run.domain}/{subset}" if subset else run.domain
            subsets[column] = subset
            groups.setdefault((run.method, column), []).append(run)
    columns = sorted(subsets, key=_column_key)
    methods = [m for m in METHOD_ORDER if any(key[0] == m for key in groups)]
    rows = [{"method": METHOD_LABELS.get(m, m),
             **{c: _format(interval(groups.get((m, c), []), point, subsets[c], n_resamples)) for c in columns}}
            for m in methods]
    first = initial_runs(runs)
    rows.append({"method": H0_LABEL, **{c: _format(interval(first.get(c.split("/")[0], []), "initial", subsets[c],
                                                             n_resamples)) for c in columns}})
    if floors and not by_subset:
        rows.append({"method": FLOOR_LABEL, **{c: _format(floor_interval(floors.get(c), n_resamples))
                                               for c in columns}})
    frame = pd.DataFrame(rows, columns=["method", *columns])
    frame.attrs["caption"] = _caption(point, runs[0].k, "sub-dataset" if by_subset else "domain")
    return frame


def points_table(runs_root: str | Path, preset: str, domains: list[str] | None = None,
                 floors: dict[str, Any] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """The three numbers of every method, each labelled: final (the headline), the point
    its own signal selects (no test data), and the best over evaluations (selected on test);
    rows per domain and method, h0 and the floor beside them."""
    runs = [r for r in main_runs(runs_root, preset) if domains is None or r.domain in domains]
    if not runs:
        raise ValueError(f"no finished runs under {Path(runs_root) / preset}")
    k = runs[0].k
    headers = {p: POINT_LABELS[p].format(k=k) for p in POINTS}
    rows = []
    first = initial_runs(runs)
    for domain in sorted({r.domain for r in runs}, key=_column_key):
        for method in METHOD_ORDER:
            group = [r for r in runs if r.domain == domain and r.method == method]
            if group:
                rows.append({"domain": domain, "method": METHOD_LABELS.get(method, method),
                             **{headers[p]: _format(interval(group, p, n_resamples=n_resamples)) for p in POINTS}})
        h0 = _format(interval(first[domain], "initial", n_resamples=n_resamples))
        rows.append({"domain": domain, "method": H0_LABEL, **{headers[p]: h0 for p in POINTS}})
        if floors and domain in floors:
            floor = _format(floor_interval(floors[domain], n_resamples))
            rows.append({"domain": domain, "method": FLOOR_LABEL, **{headers[p]: floor for p in POINTS}})
    frame = pd.DataFrame(rows)
    frame.attrs["caption"] = ("three numbers per method (%): mean over seeds × test problems [95 % bootstrap "
                              "interval], n = seeds; only the last column looks at test results to choose")
    return frame


def paired_comparison(runs_root: str | Path, preset: str, point: str = "final", reference: str = "whale",
                      domains: list[str] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """`reference` − each other method (and − h0 with the initial weights), in percentage
    points of test mean@k at `point`, paired on the same seeds and the same test problems,
    with the 95 % bootstrap interval of the paired differences."""
    runs = [r for r in main_runs(runs_root, preset) if domains is None or r.domain in domains]
    mine = [r for r in runs if r.method == reference]
    if not mine:
        raise ValueError(f"no finished {reference} runs under {Path(runs_root) / preset}")
    columns = sorted({r.domain for r in runs}, key=_column_key)
    first = initial_runs(runs)

    def cell(domain: str, baseline: dict[int, dict[str, float]]) -> str:
        treated = seed_scores([r for r in mine if r.domain == domain], point)
        if not treated or not baseline or not set(treated) & set(baseline):
            return ABSENT
        return _format(paired_difference(treated, baseline, n_resamples), signed=True)

    label = METHOD_LABELS.get(reference, reference)
    rows = [{"comparison": f"{label} − {METHOD_LABELS.get(m, m)}",
             **{d: cell(d, seed_scores([r for r in runs if r.domain == d and r.method == m], point)) for d in columns}}
            for m in METHOD_ORDER if m != reference and any(r.method == m for r in runs)]
    rows.append({"comparison": f"{label} − {H0_LABEL}",
                 **{d: cell(d, seed_scores(first.get(d, []), "initial")) for d in columns}})
    frame = pd.DataFrame(rows, columns=["comparison", *columns])
    frame.attrs["caption"] = (f"{label} − baseline in percentage points of {POINT_LABELS[point].format(k=mine[0].k)}"
                              f", paired on the same seeds and test problems [95 % bootstrap interval], n = seeds "
                              f"shared; {ABSENT} = no pair")
    return frame


def _column_key(column: str) -> tuple[int, str]:
    domain = column.split("/")[0]
    return (DOMAIN_ORDER.index(domain) if domain in DOMAIN_ORDER else len(DOMAIN_ORDER)), column


def schedule_grid(runs_root: str | Path, preset: str, floors: dict[str, Any] | None = None,
                  n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """Table 3: per schedule, the final test mean@k (%, the headline) and the best over
    evaluations (selected on test), each with its interval, the rollouts at which the best
    was reached and the rollouts consumed; h0 (and the floor) beside them."""
    groups: dict[str, list[RunSummary]] = {}
    for run in grid_runs(runs_root, preset):
        groups.setdefault(schedule_label(run), []).append(run)
    if not groups:
        raise ValueError(f"no finished schedule-grid runs under {Path(runs_root) / preset}")
    some = next(iter(groups.values()))[0]
    final, best = (POINT_LABELS[p].format(k=some.k) for p in ("final", "best"))
    rows = [{"schedule": label, final: _format(interval(runs, "final", n_resamples=n_resamples)),
             best: _format(interval(runs, "best", n_resamples=n_resamples)),
             "rollouts at best": _mean_std([float(r.best["rollouts"]) for r in runs]).replace(".0", ""),
             "rollouts consumed": _mean_std([float(r.rollouts_consumed) for r in runs]).replace(".0", ""),
             "seeds": len(runs)} for label, runs in groups.items()]
    everything = [r for runs in groups.values() for r in runs]
    h0 = _format(interval(initial_runs(everything)[some.domain], "initial", n_resamples=n_resamples))
    rows.append({"schedule": H0_LABEL, final: h0, best: h0, "rollouts at best": "0", "rollouts consumed": "0",
                 "seeds": len(initial_runs(everything)[some.domain])})
    if floors and some.domain in floors:
        floor = _format(floor_interval(floors[some.domain], n_resamples))
        rows.append({"schedule": FLOOR_LABEL, final: floor, best: floor, "rollouts at best": "0",
                     "rollouts consumed": "0", "seeds": len(floors[some.domain]) if isinstance(
                         floors[some.domain], dict) else 1})
    frame = pd.DataFrame(rows)
    frame.attrs["caption"] = (f"schedule grid on {some.domain}: mean over seeds × test problems [95 % bootstrap "
                              f"interval], n = seeds; rollouts: mean ± std over seeds")
    return frame


def schedule_label(run: RunSummary) -> str:
    if run.method == "whale":
        epochs, iterations = run.schedule
        return f"(E={epochs:g}, I={iterations})"
    return METHOD_LABELS.get(run.method, run.method)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' own needs the optional `tabulate`)."""
    header = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    caption = frame.attrs.get("caption")
    return (f"{caption}\n\n" if caption else "") + "\n".join(lines) + "\n"


def save_table(frame: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write `stem`.md and `stem`.csv; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, csv = stem.parent / f"{stem.name}.md", stem.parent / f"{stem.name}.csv"
    md.write_text(to_markdown(frame), encoding="utf-8")
    frame.to_csv(csv, index=False)
    return [md, csv]
