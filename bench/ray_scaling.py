"""Ray backend scaling: the same rollout through the local engine, the local backend, one
Ray worker and two Ray workers, in one process (so the ratios are robust to a noisy
machine), checking that every backend returns exactly the local trajectories.

On a 2-core machine the two-worker figure measures Ray's overhead and how well two
1-thread samplers share two cores against one 2-thread sampler; it is not a speed-up one
should expect from adding cores (see docs/scaling.md for the cluster picture).

    flock /tmp/whalekit-cpu.lock python bench/ray_scaling.py --model smollm2-135m --episodes 32 --new-tokens 64

Measured (2 shared cores, CPU kind not recorded: measured 2026-12-01, before the project named
it; AVX2-only or AVX-512/AMX;
SmolLM2-135M, 1,929 generated tokens, --repeats 3; a --repeats 2 run
in brackets): local engine 24.17 s (22.69), local backend 1.06x (1.00x), one Ray worker x 2 CPUs
1.11x (1.12x), two Ray workers x 1 CPU 1.02x (1.10x) of the local engine; two workers vs one
0.92x (0.98x); every backend returned exactly the local trajectories. See docs/scaling.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for rollout_throughput's harness


def timed(fn, repeats: int) -> tuple[float, list]:
    """Median wall seconds over `repeats` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def record(trajectories: list) -> list[dict]:
    return [{**dataclasses.asdict(t), "timings": {}} for t in trajectories]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    args = parser.parse_args()

    import ray
    import torch
    from rollout_throughput import LongAnswer

    from whalekit.domains.base import get_domain
    from whalekit.rollouts.backends import BackendConfig, LocalBackend
    from whalekit.rollouts.backends.ray_backend import RayBackend, connect
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
    from whalekit.samplers.models import load_policy

    policy = load_policy(args.model)
    domain = get_domain("toy")
    tasks = domain.load_splits(n_train=args.episodes, n_search=1, n_test=1, seed=0).train
    harness = LongAnswer()
    harness.new_tokens = args.new_tokens
    runtime = InProcessHarness(harness)
    episodes = [Episode(t, runtime, 0) for t in tasks]
    config = RolloutConfig(seed=0, progress=False)
    print(f"model {args.model}, {args.episodes} episodes x {args.new_tokens} new tokens, torch threads "
          f"{torch.get_num_threads()}, ray {ray.__version__}")

    rows = []
    rollout(domain, episodes[:4], policy.sampler, config)  # warm-up
    seconds, reference = timed(lambda: rollout(domain, episodes, policy.sampler, config), args.repeats)
    tokens = sum(t.generated_tokens for t in reference)
    rows.append(("local engine", seconds, True))
    local_backend = LocalBackend(policy.sampler)
    seconds, out = timed(lambda: local_backend.rollout(domain, episodes, config), args.repeats)
    rows.append(("local backend", seconds, record(out) == record(reference)))

    connect(BackendConfig(kind="ray", init_options={"num_cpus": args.cpus, "log_to_driver": False}))
    for workers in (1, 2):
        start = time.perf_counter()
        backend = RayBackend(BackendConfig(kind="ray", num_workers=workers, cpus_per_worker=args.cpus / workers),
                             model=args.model)
        started = time.perf_counter() - start
        backend.rollout(domain, episodes[:4], config)  # warm-up
        seconds, out = timed(lambda b=backend: b.rollout(domain, episodes, config), args.repeats)
        rows.append((f"ray, {workers} worker{'s' if workers > 1 else ''} x {args.cpus // workers} CPU", seconds,
                     record(out) == record(reference)))
        print(f"  ray {workers} worker(s): started in {started:.1f} s")
        backend.close()
    ray.shutdown()

    local = rows[0][1]
    print(f"\n{'backend':<26} {'wall s':>8} {'tok/s':>8} {'vs local':>9}  same trajectories")
    for name, seconds, same in rows:
        print(f"{name:<26} {seconds:>8.2f} {tokens / seconds:>8.1f} {local / seconds:>8.2f}x  {same}")
    one, two = rows[2][1], rows[3][1]
    print(f"\ntwo workers vs one: {one / two:.2f}x; per generated token (local engine): {local / tokens * 1e3:.2f} ms "
          f"wall = {local * torch.get_num_threads() / tokens * 1e3:.2f} core-ms ({tokens} tokens)")
    if not all(same for _, _, same in rows):
        sys.exit("ray_scaling: a backend returned other trajectories than the local engine")


if __name__ == "__main__":
    main()
