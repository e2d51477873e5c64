"""Threats to validity that the records themselves show, and the cells they touch.

Why: a table of intervals looks equally solid in every cell, but some runs were resumed
after a kill, some (domain, seed) groups mix CPU kinds (and so float32 with bf16), the
"shared" initial evaluation of a (domain, seed) differs between runs made at different
times, and the starting harness was calibrated on the test split. `docs/results.md` lists
each, generated from the records (not from memory), and marks each affected cell.

    threats = find_threats(runs, calibrations, main)    # [Threat(marker="†", ...), ...]
    markers(threats, "chess", "whale")            # "†‡": the markers of the cells of that method
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.report.run_summaries import RunSummary

RESUME_GAP_S = 600.0  # wall clock beyond the phase clock: the run stood still (killed, resumed later)
RESUMED, MIXED_CPU, INITIAL_DIFFERS, MINIMUM_BINDS = "†", "‡", "§", "¶"


@dataclass(frozen=True)
class Threat:
    """One threat: its marker (None: it touches the whole set, not single cells), a title,
    the lines that say what the records show, and the (domain, method) cells it touches."""

    marker: str | None
    title: str
    lines: tuple[str, ...]
    cells: frozenset[tuple[str, str]] = field(default_factory=frozenset)


def clock_gap_s(run: RunSummary) -> float:
    """The run's wall time beyond what its phase clock accounts for (seconds)."""
    end = run.end or {}
    clocked = sum(float(v) for e in run.events for v in (e.get("timing") or {}).values()
                  if isinstance(v, (int, float)))
    return float(end.get("wall_s") or 0.0) - clocked


def _cpu(run: RunSummary) -> str:
    return str((run.config.get("provenance") or {}).get("cpu_kind", "unknown"))


def resumed_runs(runs: Sequence[RunSummary]) -> Threat:
    found = [(r, clock_gap_s(r)) for r in runs if clock_gap_s(r) > RESUME_GAP_S]
    lines = tuple(f"`{r.domain}/{r.name}`: wall time {float((r.end or {}).get('wall_s', 0)):,.0f} s, "
                  f"{gap:,.0f} s of it outside every phase (stopped and resumed)" for r, gap in found)
    return Threat(RESUMED, f"Runs resumed after a kill or a stop ({len(found)})",
                  lines or ("none: every run's wall time is accounted for by its phase clock",),
                  frozenset((r.domain, r.method) for r, _ in found))


def mixed_cpu_groups(runs: Sequence[RunSummary]) -> Threat:
    """(domain, seed) groups whose runs were made on more than one CPU kind: the methods of
    one seed are then not compared on the same numerics (no native bf16: float32)."""
    groups: dict[tuple[str, int], set[str]] = defaultdict(set)
    for run in runs:
        groups[(run.domain, run.seed)].add(_cpu(run))
    odd = {key: kinds for key, kinds in groups.items() if len(kinds) > 1}
    lines = []
    cells: set[tuple[str, str]] = set()
    for domain, seed in sorted(odd):
        by_kind: dict[str, list[str]] = defaultdict(list)
        for run in runs:
            if (run.domain, run.seed) == (domain, seed):
                by_kind[_cpu(run)].append(run.name)
        minority = min(by_kind, key=lambda kind: (len(by_kind[kind]), kind))
        cells.update((domain, run.method) for run in runs if (run.domain, run.seed) == (domain, seed)
                     and _cpu(run) == minority)
        lines.append(f"{domain} seed {seed}: " + "; ".join(f"{kind}: {', '.join(sorted(names))}"
                                                          for kind, names in sorted(by_kind.items())))
    every = sorted({_cpu(r) for r in runs})
    lines.append("CPU kinds in the whole set: " + "; ".join(
        f"{kind} ({sum(_cpu(r) == kind for r in runs)} runs)" for kind in every))
    return Threat(MIXED_CPU, f"(domain, seed) groups made on more than one CPU kind ({len(odd)})", tuple(lines),
                  frozenset(cells))


def differing_initial_evaluations(runs: Sequence[RunSummary]) -> Threat:
    """The initial test evaluation of one (domain, seed, starting harness) should be one
    number shared by every method; where it was made again (another machine's store), it
    differs by sampling noise and the paired differences inherit that."""
    groups: dict[tuple[str, int, str], dict[float, list[RunSummary]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        start = str(run.config.get("initial_harness", "h0"))
        groups[(run.domain, run.seed, start)][round(float(run.initial["mean_at_k"]), 6)].append(run)
    lines: list[str] = []
    cells: set[tuple[str, str]] = set()
    for (domain, seed, start), values in sorted(groups.items()):
        if len(values) > 1:
            lines.append(f"{domain} seed {seed} from {start}: " + ", ".join(
                f"{100 * value:.1f} ({len(group)} runs)" for value, group in sorted(values.items())))
            common = max(values, key=lambda v: len(values[v]))
            cells.update((r.domain, r.method) for v, group in values.items() if v != common for r in group)
    return Threat(INITIAL_DIFFERS, f"Initial evaluations that differ within a (domain, seed) ({len(lines)} groups)",
                  tuple(lines) or ("none",), frozenset(cells))


def adaptive_minimum_binds(runs: Sequence[RunSummary]) -> Threat:
    """Adaptive harness stages that ran exactly the configured minimum of search iterations:
    there the switching rule did not decide, the minimum did, so "adaptive vs fixed" compares
    a search-heavy allocation rather than the rule."""
    stages, bound = 0, 0
    cells: set[tuple[str, str]] = set()
    for run in runs:
        if run.method != "adaptive":
            continue
        minimum = int((run.config.get("adaptive") or {}).get("min_search_iterations", 1))
        for end in run.of("stage_end"):
            if end.get("kind") == "harness":
                stages += 1
                if int(end.get("steps", 0)) == minimum and not end.get("budget_exhausted"):
                    bound += 1
                    cells.add((run.domain, run.method))
    line = (f"{bound} of {stages} adaptive harness stages ran exactly `min_search_iterations` iterations: the "
            "minimum, not the switching rule, set their length") if stages else "no adaptive run recorded"
    return Threat(MINIMUM_BINDS, "The adaptive rule's minimum binds", (line,), frozenset(cells))


def saturated_problems(runs: Sequence[RunSummary], methods: Sequence[str] = ("whale", "weight_only", "fst",
                                                                           "stagewise", "stagewise_reverse")
                       ) -> Threat:
    """Per domain: how many test problems each trained run solves in every sample at the
    end. Where most are, the test set is too easy to tell the trained methods apart."""
    lines = []
    for domain in sorted({r.domain for r in runs}):
        group = [r for r in runs if r.domain == domain and r.method in methods]
        counts = [(sum(v >= 1.0 for v in r.problem_scores(r.final).values()), len(r.problem_scores(r.final)))
                  for r in group]
        if counts and sorted(c for c, _ in counts)[len(counts) // 2] >= max(n for _, n in counts) / 2:
            lines.append(f"{domain}: {min(c for c, _ in counts)}–{max(c for c, _ in counts)} of "
                         f"{max(n for _, n in counts)} test problems solved in all samples by each of the "
                         f"{len(group)} trained runs ({', '.join(methods)}): most of the test set no longer "
                         "separates them")
    return Threat(None, "Test problems the trained methods all saturate", tuple(lines) or ("none",))


def calibration_split(calibrations: Path) -> Threat:
    """Which split the starting harness and the preset's data settings were calibrated on."""
    lines = []
    for path in sorted(calibrations.glob("*.json")):
        data: dict[str, Any] = json.loads(path.read_text())
        split = data.get("split", "unknown")
        note = " (chosen from test results: these choices are not held out)" if split == "test" else ""
        lines.append(f"`{path}`: split `{split}`, harness `{data.get('initial_harness', '?')}`{note}")
    return Threat(None, "Calibration of the starting point", tuple(lines) or ("no calibration records found",))


def find_threats(runs: Sequence[RunSummary], calibrations: Path,
                 main: Sequence[RunSummary] | None = None) -> list[Threat]:
    """Every threat the records show, cell-level ones first; `main`: the main comparison's
    runs (the saturation check reads those), default all."""
    return [resumed_runs(runs), mixed_cpu_groups(runs), differing_initial_evaluations(runs),
            adaptive_minimum_binds(runs), saturated_problems(runs if main is None else main),
            calibration_split(calibrations)]


def markers(threats: Sequence[Threat], domain: str, *methods: str) -> str:
    """The markers of the threats that touch any of `methods` in `domain` ('' when none)."""
    return "".join(t.marker for t in threats if t.marker and any((domain, m) in t.cells for m in methods))


def threats_markdown(threats: Sequence[Threat]) -> list[str]:
    lines = ["## Threats to validity", "",
             "Generated from the records. A marked cell in the tables above rests on a run named here."]
    for threat in threats:
        lines += ["", f"**{threat.marker + ' ' if threat.marker else ''}{threat.title}**", ""]
        lines += [f"- {line}" for line in threat.lines]
    return lines + [""]
