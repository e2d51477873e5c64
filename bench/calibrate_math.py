"""Calibrate the math preset: roll out harnesses with SmolLM2-135M on the test split and
print mean@k and the mean of every behaviour flag, so the default problem mix can be
chosen where h0 is clearly above 0 and far below the ceiling.

Heavy: run it under the CPU lock.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_math.py --n-test 64 --samples 8 --harness h0 h1

Measured 2026-12-01 on the quiet 2-core CPU machine (AVX2, no native bf16), vLLM CPU sampler
in float32, faithful h0 (strict boxed answer, 2 turns), the default mix (arithmetic 0.7,
multistep 0.1, word 0.1, modular 0.05, algebra 0.05), seed 0, T 1, top_k 20:

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_math.py --n-test 64 --samples 8 \
        --harness h0 h1 --json /tmp/math_cal1.json --dump /tmp/math1

    harness  mean@8  boxed  tool_calls  tool_errors  truncated  turns  wall
    h0       0.000   0.049  0.412       0.293        0.098      1.28   443 s
    h1       0.574   1.000  1.000       0.143        0.068      2.00   223 s

(64 problems x 8 samples = 512 episodes each.) h0 is 0 / 512, arithmetic included
(0 / 368 on one-operation sums and times tables): SmolLM2-135M does not answer the
question under the authors' prompt; the 4.9 % of replies that box something box the
instruction's own placeholder ("\\boxed{'The final answer goes here.'}"). No problem mix
moves that, so the faithful h0 cannot be calibrated into 5-35 % for this model by data
alone. h1 by family: arithmetic 0.726, multistep 0.393, modular 0.094, algebra 0.062,
word 0.025. (The same mix under the former h0, with a last-number fallback, scored 0.109.)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from statistics import mean

from whalekit.domains.base import get_domain
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.models import load_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-test", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--harness", nargs="+", default=["h0", "h1"])
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "lockstep"])
    parser.add_argument("--sampler", default="auto", choices=["auto", "hf", "vllm"])
    parser.add_argument("--mix", type=json.loads, default=None, help='JSON family weights, e.g. {"arithmetic": 1}')
    parser.add_argument("--source", default="generated")
    parser.add_argument("--path", default=None)
    parser.add_argument("--dump", default=None, help="write trajectories as JSONL here")
    parser.add_argument("--json", default=None, help="also write the summary here")
    args = parser.parse_args()

    domain = get_domain("math", **({"mix": args.mix} if args.mix else {}))
    splits = domain.load_splits(n_train=0, n_search=0, n_test=args.n_test, seed=args.seed, source=args.source,
                                path=args.path)
    policy = load_policy(args.model, sampler=args.sampler)
    print(f"mix={domain.mix} n_test={len(splits.test)} samples={args.samples} T={args.temperature}", flush=True)
    summary: dict[str, dict] = {}
    for name in args.harness:
        harness = InProcessHarness(domain.harness_source(name))
        episodes = [Episode(task, harness, i) for task in splits.test for i in range(args.samples)]
        start = time.perf_counter()
        trajectories = rollout(domain, episodes, policy.sampler,
                               RolloutConfig(temperature=args.temperature, scheduling=args.scheduling,
                                             seed=args.seed, description=name))
        wall = time.perf_counter() - start
        flags: dict[str, list[float]] = defaultdict(list)
        by_subset: dict[str, list[float]] = defaultdict(list)
        failures: dict[str, int] = defaultdict(int)
        for trajectory in trajectories:
            by_subset[trajectory.subset].append(trajectory.reward)
            failures[str(domain.failure_mode(trajectory))] += 1
            for key, value in trajectory.flags.items():
                if isinstance(value, (bool, int, float)):
                    flags[key].append(float(value))
        score = mean(t.reward for t in trajectories)
        summary[name] = {"mean@k": score, "k": args.samples, "n_test": len(splits.test), "wall_s": wall,
                         "episodes": len(trajectories), "errors": sum(1 for t in trajectories if t.error),
                         "flags": {k: mean(v) for k, v in sorted(flags.items())},
                         "by_subset": {k: mean(v) for k, v in sorted(by_subset.items())},
                         "failure_modes": dict(failures)}
        print(f"\n[{name}] mean@{args.samples} = {score:.3f}   wall {wall:.0f} s   ({len(trajectories)} episodes)")
        print("  per subset: " + ", ".join(f"{k} {mean(v):.3f} (n={len(v)})" for k, v in sorted(by_subset.items())))
        print("  flags: " + ", ".join(f"{k} {mean(v):.3f}" for k, v in sorted(flags.items())))
        print("  failure modes: " + ", ".join(f"{k} {v}" for k, v in sorted(failures.items())), flush=True)
        if args.dump:
            with open(f"{args.dump}.{name}.jsonl", "w") as handle:
                for trajectory in trajectories:
                    handle.write(json.dumps(trajectory.to_json()) + "\n")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"mix": domain.mix, "temperature": args.temperature, "seed": args.seed, "model": args.model,
                       "harnesses": summary}, handle, indent=2)


if __name__ == "__main__":
    main()
