"""Calibrate the search-QA preset: roll out harnesses with SmolLM2-135M on the test split
and print mean@k, per-family accuracy and the mean of every behaviour flag.

Why: the default world size and question mix must leave h0 above zero and far below
the ceiling, with a better harness measurably ahead. Run it under the CPU lock:

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_searchqa.py --n-test 64 --samples 8

Measured 2026-12-01 (quiet 2-core CPU, vLLM CPU sampler in float32, T 1, top_k 20, the
faithful h0, default world and mix):
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_searchqa.py --n-test 64 --samples 8 \
        --harness h0 h1 --json /tmp/sqa_cal1.json --show 2
  h0: mean@8 0.000 (251 s wall). answered 0.023, format_valid 0.023, searches 0.012,
      retrieval_hit 0.000; failure modes no_answer 500 / 512, no_search 12. The model answers
      in prose from its own imagination ("In United Arab Emirates (UAE), Bilein is based
      here.") and almost never writes a tag: with the authors' minimal prompt SmolLM2-135M
      does not use the tool, so no question family (all seven score 0) lifts h0 above 0.
  h1: mean@8 0.090 (120 s wall). format_valid 1.000, searches 1.000 (forced), retrieval_hit
      0.734, correct_given_hit 0.122; founded_year 0.239, occupation 0.167, born_first 0.091,
      birthplace 0.010, birth_country / founder_birthplace / org_country 0.000.
--show N prints N whole trajectories per harness.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from whalekit.domains.base import get_domain
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.models import load_policy


def summarize(trajectories: list) -> dict[str, float]:
    """Mean of every numeric flag; conditional flags (absent when undefined) over the
    trajectories that have them."""
    values: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        values["correct"].append(float(t.correct))
        for key, value in t.flags.items():
            if isinstance(value, (bool, int, float)):
                values[key].append(float(value))
    return {k: sum(v) / len(v) for k, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-test", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--harness", nargs="+", default=["h0", "h1"], help="names in harnesses/ or .py paths")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "lockstep"])
    parser.add_argument("--sampler", default="auto", choices=["auto", "hf", "vllm"])
    parser.add_argument("--batch", type=int, default=64, help="sampler max batch size")
    parser.add_argument("--json", help="also write the summary to this file")
    parser.add_argument("--progress", action="store_true", help="show a progress bar per rollout")
    parser.add_argument("--show", type=int, default=0, help="print this many whole trajectories per harness")
    args = parser.parse_args()

    domain = get_domain("searchqa")
    splits = domain.load_splits(n_train=0, n_search=0, n_test=args.n_test, seed=args.seed)
    policy = load_policy(args.model, max_batch_size=args.batch, sampler=args.sampler)
    references = {task.id: task.reference for task in splits.test}
    report = {}
    for name in args.harness:
        source = Path(name).read_text() if name.endswith(".py") else domain.harness_source(name)
        runtime = InProcessHarness(source)
        episodes = [Episode(task, runtime, i) for task in splits.test for i in range(args.samples)]
        start = time.perf_counter()
        trajectories = rollout(domain, episodes, policy.sampler,
                               RolloutConfig(temperature=args.temperature, scheduling=args.scheduling,
                                             seed=args.seed, progress=args.progress))
        wall = time.perf_counter() - start
        summary = summarize(trajectories)
        by_family: dict[str, list[float]] = defaultdict(list)
        for t in trajectories:
            by_family[t.subset].append(float(t.correct))
        modes: dict[str, int] = defaultdict(int)
        for t in trajectories:
            modes[str(domain.failure_mode(t))] += 1
        print(f"\n== {name}: mean@{args.samples} = {summary['correct']:.3f}  "
              f"({len(splits.test)} questions x {args.samples} samples, {wall:.0f} s wall)")
        print("  per family: " + ", ".join(f"{f} {sum(v) / len(v):.3f}" for f, v in sorted(by_family.items())))
        print("  flags: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(summary.items())))
        print("  failure modes: " + ", ".join(f"{k} {v}" for k, v in sorted(modes.items())))
        example = next((t for t in trajectories if t.turns), None)
        if example is not None:
            print("  example reply: " + repr(example.turns[0].text[:200]), flush=True)
        for t in trajectories[: args.samples * args.show: args.samples]:
            print(f"  --- {t.subset} reference={references[t.task_id]!r} answer={t.final_answer!r} correct={t.correct}")
            for m in t.messages:
                print(f"    [{m.role}/{m.kind}] {m.content!r}")
        report[name] = {"mean": summary["correct"], "wall_s": wall, "flags": summary,
                        "per_family": {f: sum(v) / len(v) for f, v in by_family.items()}, "failure_modes": modes}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
