"""Read finished run directories back into numbers: the paper's tables (Markdown + CSV)
and the per-run summaries every figure in `whalekit.plots` draws from.

Why here and not in the notebooks: a figure or table must be rebuilt from `runs/` alone
(never from a notebook's outputs), and the same selection rule (which run is "the"
WHALE run of a domain, which are the schedule-grid runs) must hold in every figure.

    table = main_comparison("runs", "cpu")            # Table 2: best test mean@k (%)
    save_table(table, "figures/table2_main")          # -> .md and .csv
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from whalekit.runs import RunDir

METHOD_ORDER = ("whale", "adaptive", "weight_only", "harness_only", "stagewise", "stagewise_reverse", "fst")
METHOD_LABELS = {"whale": "WHALE", "adaptive": "WHALE (adaptive)", "weight_only": "weights only",
                 "harness_only": "harness only", "stagewise": "stagewise (W→H)",
                 "stagewise_reverse": "stagewise (H→W)", "fst": "FST (prompt only)"}
DOMAIN_ORDER = ("chess", "math", "searchqa", "toy")


@dataclass
class RunSummary:
    """One run directory's test evaluations and end record, as plots and tables need them."""

    path: Path
    config: dict[str, Any]
    evals: list[dict[str, Any]]  # test_eval events, in order
    events: list[dict[str, Any]] = field(repr=False, default_factory=list)  # every event

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
        """The test evaluation with the highest mean@k (the earliest one on ties)."""
        if not self.evals:
            raise ValueError(f"{self.path}: run has no test_eval event")
        return max(self.evals, key=lambda e: (e["mean_at_k"], -e["rollouts"]))

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
              finished_only: bool = True) -> list[RunSummary]:
    """Every run under runs_root/preset[/domain], optionally one method, in a stable order."""
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
    return sorted(runs, key=_sort_key)


def _sort_key(run: RunSummary) -> tuple[Any, ...]:
    method = METHOD_ORDER.index(run.method) if run.method in METHOD_ORDER else len(METHOD_ORDER)
    domain = DOMAIN_ORDER.index(run.domain) if run.domain in DOMAIN_ORDER else len(DOMAIN_ORDER)
    return domain, run.domain, method, run.schedule, run.seed


def default_run_name(preset: str, domain: str, method: str, seed: int) -> str:
    """The run name the preset's default schedule gives a method: the main comparison's run."""
    from whalekit.whale import resolve_config

    return resolve_config(preset, domain=domain, method=method, seed=seed).run_name


def main_runs(runs_root: str | Path, preset: str, domain: str | None = None) -> list[RunSummary]:
    """The runs of the main comparison: each method at the preset's default schedule (the
    schedule-grid runs of the same domain are left out), every seed found."""
    return [r for r in find_runs(runs_root, preset, domain)
            if r.name == default_run_name(preset, r.domain, r.method, r.seed)]


def grid_runs(runs_root: str | Path, preset: str) -> list[RunSummary]:
    """The schedule grid: WHALE at every schedule the preset's `grid` lists, plus stagewise,
    on the grid's domain."""
    from whalekit.presets import load_preset
    from whalekit.schedules import parse_schedule

    grid = load_preset(preset).get("grid") or {}
    if "domain" not in grid:
        raise ValueError(f"preset {preset!r} has no 'grid' section with a domain")
    wanted = {parse_schedule(s) for s in grid.get("schedules", [])}
    runs = find_runs(runs_root, preset, grid["domain"])
    whale = [r for r in runs if r.method == "whale" and r.schedule in wanted]
    stagewise = [r for r in main_runs(runs_root, preset, grid["domain"]) if r.method == "stagewise"]
    return sorted(whale, key=lambda r: (r.schedule, r.seed)) + stagewise


def _mean_std(values: list[float]) -> str:
    """'41.2' for one seed, '41.2 ± 3.1' for several (sample std)."""
    if not values:
        return ""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.1f}"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.1f} ± {std:.1f}"


def main_comparison(runs_root: str | Path, preset: str, by_subset: bool = False,
                    domains: list[str] | None = None) -> pd.DataFrame:
    """Table 2: best test mean@k (%) per method (rows) and domain (columns); with
    `by_subset`, one column per domain/sub-dataset, taken at the run's best evaluation."""
    runs = [r for r in main_runs(runs_root, preset) if domains is None or r.domain in domains]
    if not runs:
        raise ValueError(f"no finished runs under {Path(runs_root) / preset}")
    cells: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        best = run.best
        if by_subset:
            for subset, accuracy in best.get("by_subset", {}).items():
                cells.setdefault((run.method, f"{run.domain}/{subset}"), []).append(100.0 * accuracy)
        else:
            cells.setdefault((run.method, run.domain), []).append(100.0 * best["mean_at_k"])
    methods = [m for m in METHOD_ORDER if any(key[0] == m for key in cells)]
    columns = sorted({key[1] for key in cells}, key=_column_key)
    rows = [{"method": METHOD_LABELS.get(m, m), **{c: _mean_std(cells.get((m, c), [])) for c in columns}}
            for m in methods]
    k = runs[0].k
    frame = pd.DataFrame(rows, columns=["method", *columns])
    frame.attrs["caption"] = f"best test mean@{k} (%) per method and {'sub-dataset' if by_subset else 'domain'}"
    return frame


def _column_key(column: str) -> tuple[int, str]:
    domain = column.split("/")[0]
    return (DOMAIN_ORDER.index(domain) if domain in DOMAIN_ORDER else len(DOMAIN_ORDER)), column


def schedule_grid(runs_root: str | Path, preset: str) -> pd.DataFrame:
    """Table 3: per schedule, the best test mean@k (%), the rollouts spent when it was
    reached and the rollouts the run consumed in all."""
    groups: dict[str, list[RunSummary]] = {}
    for run in grid_runs(runs_root, preset):
        groups.setdefault(schedule_label(run), []).append(run)
    if not groups:
        raise ValueError(f"no finished schedule-grid runs under {Path(runs_root) / preset}")
    rows = [{"schedule": label,
             "best mean@k (%)": _mean_std([100.0 * r.best["mean_at_k"] for r in runs]),
             "rollouts at best": _mean_std([float(r.best["rollouts"]) for r in runs]).replace(".0", ""),
             "rollouts consumed": _mean_std([float(r.rollouts_consumed) for r in runs]).replace(".0", ""),
             "seeds": len(runs)} for label, runs in groups.items()]
    frame = pd.DataFrame(rows)
    frame.attrs["caption"] = f"schedule grid on {next(iter(groups.values()))[0].domain}"
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
