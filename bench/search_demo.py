"""Harness-search demo: one search stage of the reflective (or another) proposer with
SmolLM2-135M on one domain's harness-search split; prints each iteration and the
archive's leaderboard, with h0's score for reference.

Why a script: it is the end-to-end check of the harness phase on real rollouts (run it
under the CPU lock), and its leaderboard is what the issue's closing note quotes.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/search_demo.py --domain toy --iterations 6
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/search_demo.py --domain chess --n-search 24
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from whalekit.domains.base import get_domain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.base import SamplingParams
from whalekit.samplers.models import load_policy
from whalekit.sandbox.bwrap import set_isolation_mode
from whalekit.search.archive import Archive
from whalekit.search.proposers.reflective import ReflectiveProposer
from whalekit.search.stage import SearchConfig, run_search_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="toy")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--n-search", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--no-isolate", action="store_true", help="candidates run WITHOUT the sandbox (debugging)")
    args = parser.parse_args()

    domain = get_domain(args.domain)
    splits = domain.load_splits(n_train=8, n_search=args.n_search, n_test=8, seed=args.seed)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix=f"search-{args.domain}-"))
    archive = Archive.open(run_dir / "archive", domain.name)
    seed_id = archive.ensure_seed(domain.initial_harness_source())
    policy = load_policy(args.model)
    budget = RolloutBudget(args.budget)
    config = SearchConfig(iterations=args.iterations, candidates_per_iteration=args.candidates,
                          sampling=SamplingParams(temperature=args.temperature))
    if args.no_isolate:
        set_isolation_mode("none")
    proposer = ReflectiveProposer(domain.mechanisms(), seed=args.seed)
    started = time.perf_counter()
    accepted = run_search_stage(domain, archive, proposer, policy.sampler, splits.search, budget, config,
                                weights_version=0, seed=args.seed,
                                on_iteration=lambda e: print(json.dumps(e, default=str), flush=True))
    wall = time.perf_counter() - started
    print(f"\nrun dir: {run_dir}\nwall: {wall:.0f}s  rollouts: {budget.spent}  accepted: {accepted}")
    print(f"h0 {seed_id}: {archive.entry(seed_id).score(0):.3f}  best: {archive.entry(accepted).score(0):.3f}\n")
    print("| rank | id | score | correct/n | parents | change |")
    print("| --- | --- | --- | --- | --- | --- |")
    for rank, (cid, score, n) in enumerate(archive.leaderboard(0)[:10], start=1):
        entry = archive.entry(cid)
        print(f"| {rank} | {cid} | {score:.3f} | {entry.scores[0]['correct']}/{n} | "
              f"{','.join(entry.parent_ids) or '-'} | {entry.change_summary} |")
    statuses = [e.status for e in archive.entries()]
    print(f"\ncandidates: {len(statuses)} ({', '.join(f'{s}={statuses.count(s)}' for s in sorted(set(statuses)))})")


if __name__ == "__main__":
    main()
