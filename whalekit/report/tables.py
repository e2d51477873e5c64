"""The paper's tables (Markdown + CSV) from finished run directories, and the numbers
every figure in `whalekit.report.plots` shares with them (intervals, h0, the floor, labels).

Why here and not in the notebooks: a figure or table must be rebuilt from `runs/` or from
the committed records in `results/` (whalekit.records.results: thin run directories, read the
same way) alone, never from a notebook's outputs; which runs a table is about is decided
once, in `whalekit.report.run_summaries`, where every set of runs is checked to come from one
code version.

    table = main_comparison("results", "cpu")         # Table 2: final test mean@k (%) ± interval
    save_table(table, "figures/table2_main")          # -> .md and .csv
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from whalekit.domains.base import get_domain
from whalekit.domains.chess.baselines import RandomBaseline, random_legal_move_score
from whalekit.infra.runs import atomic_write
from whalekit.report.run_summaries import DOMAIN_ORDER, POINTS, RunSummary, grid_runs, main_runs, point_k
from whalekit.report.stats import N_RESAMPLES, Interval, paired_difference, seed_interval
from whalekit.run.methods import METHOD_LABELS, METHOD_ORDER

# The words every table and figure prints beside each of a run's numbers (run_summaries.POINTS).
POINT_LABELS = {"final": "final test mean@{k} (%, after the whole budget)",
                "selected": "test mean@{k} (%) at the point the run's own signal selects (no test data)",
                "best": "best test mean@{k} (%) over evaluations (selected on test)",
                "initial": "test mean@{k} (%) of h0 with the initial weights"}
POINT_SHORT = {"final": "final", "selected": "selected by own signal", "best": "best (selected on test)",
               "initial": "initial"}
H0_LABEL = "h0, initial weights (control)"
FLOOR_LABEL = "random legal move (floor)"
ABSENT = "—"  # a cell with no finished run: absent, never 0


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
    """Mean of `point` over the runs' seeds (each seed's mean over its test problems) with
    the 95 % t-interval over the seed means and the seed means (`stats.seed_interval`;
    None when there are no runs: drawn as absent)."""
    scores = [s for s in seed_scores(runs, point, subset).values() if s]
    return seed_interval([list(s.values()) for s in scores], n_resamples=n_resamples, bounds=(0.0, 1.0)) \
        if scores else None


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
    seed -> such an object. Per-task scores get the seed interval; a bare number none."""
    if floor is None:
        return None
    if isinstance(floor, (int, float)):
        return Interval(float(floor), float(floor), float(floor), 0, 0)
    per_seed = list(floor.values()) if isinstance(floor, dict) else [floor]
    tasks = [list(getattr(f, "per_task", {}).values()) for f in per_seed]
    if all(tasks):
        return seed_interval(tasks, n_resamples=n_resamples, bounds=(0.0, 1.0))
    values = [float(f) if isinstance(f, (int, float)) else float(f.mean_at_k) for f in per_seed]
    mean = sum(values) / len(values)
    return Interval(mean, min(values), max(values), len(values), 0)


def floor_scores(runs: list[RunSummary], score: Callable[..., Any] | None = None) -> dict[str, dict[int, Any]]:
    """The chess random-legal-move floor on each seed's own test problems, for the `floors`
    argument of the tables: domain -> seed -> score(tasks, k=, seed=). `score` defaults to
    whalekit.domains.chess.baselines.random_legal_move_score (chess runs only), whose value is
    kept beside the records (`FLOOR_FILE`): regenerating the puzzles takes minutes a seed."""
    kept = score is None
    if score is None:
        score = random_legal_move_score
        runs = [r for r in runs if r.domain == "chess"]
    out: dict[str, dict[int, Any]] = {}
    for domain, seeds in initial_runs(runs).items():
        for run in seeds:
            def compute(run: RunSummary = run) -> Any:
                return score(_test_tasks(run), k=run.k, seed=run.seed)

            out.setdefault(domain, {})[run.seed] = _kept_floor(run, compute) if kept else compute()
    return out


def _test_tasks(run: RunSummary) -> list[Any]:
    """The test problems of `run`'s seed, made again from its configuration."""
    c = run.config
    return get_domain(run.domain, **c.get("domain_options", {})).load_splits(
        n_train=c["n_train"], n_search=c["n_search"], n_test=c["n_test"], seed=run.seed,
        **c.get("split_options", {})).test


FLOOR_FILE = "random_floor-s{seed}.json"  # beside a domain's runs: <root>/<preset>/<domain>/


def _kept_floor(run: RunSummary, compute: Callable[[], Any]) -> RandomBaseline:
    """The random-legal-move floor of `run`'s seed, read from beside its runs when it was
    computed for the same test problems (the split settings, k and the chess domain's code),
    else computed and kept there; the file is the same bytes each time it is written."""
    c = run.config
    key = {"split": {name: c.get(name) for name in ("domain_options", "n_train", "n_search", "n_test",
                                                    "split_options")},
           "k": run.k, "seed": run.seed, "domain_code": _domain_code_sha256(run.domain)}
    path = run.path.parent / FLOOR_FILE.format(seed=run.seed)
    if path.exists():
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return RandomBaseline(**kept["floor"])
    floor = compute()
    atomic_write(path, json.dumps({"key": key, "floor": dataclasses.asdict(floor)}, indent=1, sort_keys=True) + "\n")
    return floor


@functools.cache
def _domain_code_sha256(domain: str) -> str:
    """The hash of a built-in domain's source files: a change to how its problems are made
    voids a kept floor."""
    folder = Path(inspect.getfile(type(get_domain(domain)))).parent
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _format(value: Interval | None, signed: bool = False) -> str:
    if value is None:
        return ABSENT
    if value.n_problems == 0:  # a bare number: no data to resample
        return f"{100 * value.mean:{'+' if signed else ''}.1f} (no interval)"
    return value.format(signed=signed)


def _caption(point: str, k: int | str, what: str) -> str:
    return (f"{POINT_LABELS[point].format(k=k)} per method and {what}: mean over seeds × test problems "
            f"[95 % t-interval over seed means], n = seeds; {ABSENT} = no finished run")


def main_comparison(runs_root: str | Path, preset: str, by_subset: bool = False,
                    domains: list[str] | None = None, point: str = "final",
                    floors: dict[str, Any] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """Table 2: test mean@k (%) at `point` (final | selected | best) per method (rows) and
    domain (columns), each cell the mean with its 95 % t-interval over the seed means of test
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
    frame.attrs["caption"] = _caption(point, point_k(runs, point), "sub-dataset" if by_subset else "domain")
    return frame


def points_table(runs_root: str | Path, preset: str, domains: list[str] | None = None,
                 floors: dict[str, Any] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """The three numbers of every method, each labelled: final (the headline), the point
    its own signal selects (no test data), and the best over evaluations (selected on test);
    rows per domain and method, h0 and the floor beside them."""
    runs = [r for r in main_runs(runs_root, preset) if domains is None or r.domain in domains]
    if not runs:
        raise ValueError(f"no finished runs under {Path(runs_root) / preset}")
    headers = {p: POINT_LABELS[p].format(k=point_k(runs, p)) for p in POINTS}
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
    frame.attrs["caption"] = ("three numbers per method (%): mean over seeds × test problems [95 % t-interval "
                              "over seed means], n = seeds; only the last column looks at test results to choose")
    return frame


def paired_comparison(runs_root: str | Path, preset: str, point: str = "final", reference: str = "whale",
                      domains: list[str] | None = None, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """`reference` − each other method (and − h0 with the initial weights), in percentage
    points of test mean@k at `point`, paired on the same seeds and the same test problems,
    with the 95 % paired t-interval of the per-seed differences."""
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
    measure = POINT_LABELS[point].format(k=point_k(runs, point))
    frame.attrs["caption"] = (f"{label} − baseline in percentage points of {measure}"
                              f", paired on the same seeds and test problems [95 % paired t-interval over seeds], "
                              f"n = seeds shared; {ABSENT} = no pair")
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
    everything = [r for runs in groups.values() for r in runs]
    final, best = (POINT_LABELS[p].format(k=point_k(everything, p)) for p in ("final", "best"))
    rows = [{"schedule": label, final: _format(interval(runs, "final", n_resamples=n_resamples)),
             best: _format(interval(runs, "best", n_resamples=n_resamples)),
             "rollouts at best": _mean_std([float(r.best["rollouts"]) for r in runs]).replace(".0", ""),
             "rollouts consumed": _mean_std([float(r.rollouts_consumed) for r in runs]).replace(".0", ""),
             "seeds": len(runs)} for label, runs in groups.items()]
    h0 = _format(interval(initial_runs(everything)[some.domain], "initial", n_resamples=n_resamples))
    rows.append({"schedule": H0_LABEL, final: h0, best: h0, "rollouts at best": "0", "rollouts consumed": "0",
                 "seeds": len(initial_runs(everything)[some.domain])})
    if floors and some.domain in floors:
        floor = _format(floor_interval(floors[some.domain], n_resamples))
        rows.append({"schedule": FLOOR_LABEL, final: floor, best: floor, "rollouts at best": "0",
                     "rollouts consumed": "0", "seeds": len(floors[some.domain]) if isinstance(
                         floors[some.domain], dict) else 1})
    frame = pd.DataFrame(rows)
    frame.attrs["caption"] = (f"schedule grid on {some.domain}: mean over seeds × test problems [95 % t-interval "
                              f"over seed means], n = seeds; rollouts: mean ± std over seeds")
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
