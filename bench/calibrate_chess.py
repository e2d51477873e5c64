"""Calibrate the chess preset: roll out harnesses with SmolLM2-135M on the test split and
print mean@k, each behaviour flag's mean and the wall time, so the default puzzle mix
can be chosen where h0 scores above 0 and far below the ceiling.

Run it under the shared CPU lock (2-core machine):

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_chess.py --n-test 64 --samples 8 --harness h0 h1
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_chess.py --source lichess \
        --path ../shared/realdata/lichess_puzzles/lichess_db_puzzle_uncleaned_sample.csv --themes mateIn1

Measured (default mix = generated mate-in-1, seed 0, temperature 1):
  quiet machine, vLLM sampler, --n-test 64 --samples 8 (4 min 59 s for both harnesses,
  engine start-up included): h0 mean@8 = 0.000 (format_valid 0.000, 512 episodes),
  h1 mean@8 = 0.0117 (format_valid 0.711, move_legal 0.197), h1's rollout 86 s.
  h0 fails on format alone: under the plain prompt SmolLM2-135M never replies with a bare
  move, whatever the puzzle mix. With min_mating_moves=2 (a random legal move mates 6.8%
  of the time instead of 3.9%) h0 stays at 0.000, as do three plain variants of it (an
  answer example in the instruction: format_valid 0.025; a "Move:" prefill: 0.016; both:
  0.441, but the model then copies the example move).
  Constrained decoding (2026-12-01, vLLM, same 64 puzzles x 8 samples and seeds, measured by an
  equivalent throwaway script while a reproduction shared the machine; this script's
  --harness h0 h0+legal_move_choice h1 h1+legal_move_choice repeats it): h0 0.000,
  h0+legal_move_choice 0.0332 (format_valid 1.000), h1 0.0156, h1+legal_move_choice 0.0898
  (format_valid 1.000). vLLM on CPU is not bit-reproducible, so a rerun differs slightly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

from whalekit.domains.chess import ChessDomain
from whalekit.domains.chess.baselines import random_legal_move_score
from whalekit.domains.chess.mechanisms import BY_NAME
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.mechanisms import apply_mechanism
from whalekit.models import load_policy


def harness_source(domain: ChessDomain, spec: str) -> str:
    """'h1' or 'h1+legal_move_choice+...': a shipped harness with catalogue mechanisms applied."""
    base, *mechanisms = spec.split("+")
    source = domain.harness_source(base)
    for name in mechanisms:
        source = apply_mechanism(source, BY_NAME[name])
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-test", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--harness", nargs="+", default=["h0", "h1"],
                        help="names under domains/chess/harnesses, optionally + catalogue mechanisms "
                             "(h1+legal_move_choice)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "lockstep"])
    parser.add_argument("--sampler", default="auto", choices=["auto", "hf", "vllm"])
    parser.add_argument("--source", default="generated", choices=["generated", "lichess"])
    parser.add_argument("--path", default=None, help="Lichess puzzle CSV for --source lichess")
    parser.add_argument("--themes", nargs="*", default=None)
    parser.add_argument("--mate-in-2-fraction", type=float, default=None, help="override the domain default")
    parser.add_argument("--min-mating-moves", type=int, default=None, help="override the domain default")
    parser.add_argument("--show", type=int, default=0, help="print this many sample replies per harness")
    parser.add_argument("--json", default=None, help="also write the summary here")
    args = parser.parse_args()

    knobs = {k: v for k, v in {"mate_in_2_fraction": args.mate_in_2_fraction,
                               "min_mating_moves": args.min_mating_moves}.items() if v is not None}
    domain = ChessDomain(**knobs)
    started = time.perf_counter()
    splits = domain.load_splits(n_train=0, n_search=0, n_test=args.n_test, seed=args.seed, source=args.source,
                                path=args.path, themes=args.themes)
    print(f"domain knobs: {vars(domain)}; {len(splits.test)} test puzzles in "
          f"{time.perf_counter() - started:.1f}s")
    floor = random_legal_move_score(splits.test, k=args.samples, seed=args.seed)
    print(f"uniform random legal-move player: mean@{args.samples} {floor.mean_at_k:.4f} "
          f"(exact expectation {floor.expected:.4f})")
    policy = load_policy(args.model, sampler=args.sampler)
    summary = {"random_legal_move": {"mean@k": floor.mean_at_k, "expected": floor.expected}}
    for name in args.harness:
        harness = InProcessHarness(harness_source(domain, name))
        episodes = [Episode(task, harness, i) for task in splits.test for i in range(args.samples)]
        started = time.perf_counter()
        trajectories = rollout(domain, episodes, policy.sampler,
                               RolloutConfig(temperature=args.temperature, scheduling=args.scheduling,
                                             seed=args.seed, description=name))
        wall = time.perf_counter() - started
        flags = sorted({k for t in trajectories for k, v in t.flags.items() if isinstance(v, (bool, int, float))})
        means = {k: statistics.mean(float(t.flags.get(k, 0)) for t in trajectories) for k in flags}
        by_subset: dict[str, list[float]] = defaultdict(list)
        for t in trajectories:
            by_subset[t.subset].append(t.reward)
        score = statistics.mean(t.reward for t in trajectories)
        errors = sum(1 for t in trajectories if t.error)
        summary[name] = {"mean@k": score, "flags": means, "wall_s": wall, "episodes": len(trajectories),
                         "errors": errors, "by_subset": {s: statistics.mean(v) for s, v in by_subset.items()}}
        print(f"\n== {name}: mean@{args.samples} = {score:.4f} over {len(splits.test)} puzzles "
              f"({len(trajectories)} episodes, {errors} errors) in {wall:.1f}s")
        for subset, values in sorted(by_subset.items()):
            print(f"   subset {subset}: {statistics.mean(values):.4f} ({len(values)} episodes)")
        for key, value in means.items():
            print(f"   {key:22s} {value:.3f}")
        for t in trajectories[: args.show]:
            print(f"   reply {t.turns[-1].text if t.turns else None!r} -> answer {t.final_answer!r} "
                  f"correct={t.correct}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)


if __name__ == "__main__":
    main()
