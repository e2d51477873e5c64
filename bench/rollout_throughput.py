"""Rollout throughput: the batched engine against a naive one-episode-at-a-time loop,
and the transformers sampler against the vLLM sampler inside the full multi-turn engine.

Runs in one process so the ratios are robust to a noisy machine. Also measures a large
bf16 matmul to place the engine against the compute ceiling (≈ 2 × parameters FLOPs per
generated token), and, for vLLM, the seconds one weight sync takes.

    python bench/rollout_throughput.py --batches 1 8 32 64 --new-tokens 128
    flock /tmp/whalekit-cpu.lock python bench/rollout_throughput.py --sampler hf vllm --batches 64

Measured on a quiet machine (2 cores, CPU kind not recorded: measured 2026-12-01, before the
project named it; AVX2-only or AVX-512/AMX; one process, SmolLM2-135M, 128 new tokens):
    flock /tmp/whalekit-cpu.lock /work/vvenv/bin/python bench/rollout_throughput.py \
        --sampler hf vllm --batches 64 128 --naive-episodes 2
  naive loop 18.2 tok/s; transformers sampler in the engine 67.2 (batch 64) / 105.2 (128);
  vLLM sampler 445.8 (64) / 588.7 (128) tok/s = 6.63x / 5.60x transformers; vLLM start-up
  25.2 s; weight sync 0.46, 0.42, 0.56 s; bf16 matmul ceiling 3,981 tok/s.
"""

from __future__ import annotations

import argparse
import time

from whalekit.domains.base import get_domain
from whalekit.harness import GenerationSettings, Harness
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.samplers.models import load_policy


class LongAnswer(Harness):
    """One turn of free generation: the cost of sampling, nothing else."""

    new_tokens = 128

    def system_prompt(self, task):
        return "You are a patient teacher. Explain your reasoning step by step before answering."

    def first_user_message(self, task, initial_results):
        return task.inputs["question"] + " Explain how you get the answer, then give it."

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=self.new_tokens)


def matmul_flops(dtype_name: str = "bfloat16", n: int = 2048, repeats: int = 10) -> float:
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def naive_loop(policy, domain, harness, tasks, new_tokens: int) -> tuple[int, float]:
    """model.generate once per episode, the way a first script would do it."""
    import torch

    from whalekit.episode import EpisodeDriver

    tokens, start = 0, time.perf_counter()
    for task in tasks:
        request = EpisodeDriver(harness, task.view()).begin()
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        ids = policy.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                   return_dict=True)
        with torch.inference_mode():
            out = policy.model.generate(**ids, max_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_k=0,
                                        pad_token_id=policy.tokenizer.pad_token_id)
        tokens += out.shape[1] - ids["input_ids"].shape[1]
    return tokens, time.perf_counter() - start


def engine_rates(domain, runtime, tasks, sampler, batches: list[int]) -> dict[int, tuple[int, float]]:
    """(generated tokens, seconds) of one full-engine rollout per batch size."""
    results = {}
    for batch in batches:
        episodes = [Episode(t, runtime, 0) for t in tasks[:batch]]
        start = time.perf_counter()
        trajectories = rollout(domain, episodes, sampler, RolloutConfig(progress=False))
        results[batch] = (sum(t.generated_tokens for t in trajectories), time.perf_counter() - start)
    return results


def weight_sync_seconds(sampler, state_dict, repeats: int = 3) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sampler.load_weights(state_dict)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--naive-episodes", type=int, default=4, help="episodes timed for the naive loop")
    parser.add_argument("--sampler", nargs="+", choices=["hf", "vllm"], default=["hf"],
                        help="samplers to compare in the engine (vllm: bf16, one engine for all batch sizes)")
    parser.add_argument("--vllm-dtype", default="bfloat16")
    args = parser.parse_args()

    import torch

    policy = load_policy(args.model)
    n_params = sum(p.numel() for p in policy.model.parameters())
    domain = get_domain("toy")
    tasks = domain.load_splits(n_train=max(args.batches), n_search=0, n_test=0, seed=0).train
    harness = LongAnswer()
    harness.new_tokens = args.new_tokens
    runtime = InProcessHarness(harness)

    naive_tokens, naive_s = naive_loop(policy, domain, harness, tasks[: args.naive_episodes], args.new_tokens)
    naive_rate = naive_tokens / naive_s
    flops = matmul_flops()
    ceiling = flops / (2 * n_params)
    print(f"model {args.model}: {n_params / 1e6:.1f} M parameters, {torch.get_num_threads()} threads")
    print(f"bf16 matmul: {flops / 1e9:.0f} GFLOP/s -> compute ceiling {ceiling:.0f} generated tok/s")
    print(f"naive loop (model.generate per episode): {naive_rate:.1f} tok/s over {args.naive_episodes} episodes")
    rates: dict[str, dict[int, float]] = {}
    for kind in args.sampler:
        sync = None
        if kind == "hf":
            sampler = policy.sampler
        else:
            from whalekit.samplers.vllm import VLLMSampler

            start = time.perf_counter()
            sampler = VLLMSampler(policy.path, policy.tokenizer, dtype=args.vllm_dtype)
            print(f"vllm engine start-up: {time.perf_counter() - start:.1f} s")
        results = engine_rates(domain, runtime, tasks, sampler, args.batches)
        if kind == "vllm":
            sync = weight_sync_seconds(sampler, policy.model.state_dict())
            sampler.close()
        rates[kind] = {b: tokens / seconds for b, (tokens, seconds) in results.items()}
        print(f"\nsampler {kind}")
        print(f"{'batch':>6} {'tokens':>7} {'seconds':>8} {'tok/s':>8} {'x naive':>8} {'% ceiling':>10}")
        for batch, (tokens, seconds) in results.items():
            rate = tokens / seconds
            print(f"{batch:>6} {tokens:>7} {seconds:>8.1f} {rate:>8.1f} {rate / naive_rate:>8.2f} "
                  f"{100 * rate / ceiling:>9.1f}%")
        if sync:
            print(f"weight sync (full state dict -> engine): {', '.join(f'{s:.2f}' for s in sync)} s")
    if "hf" in rates and "vllm" in rates:
        print("\nvllm / hf tok/s: " + ", ".join(f"batch {b}: {rates['vllm'][b] / rates['hf'][b]:.2f}x"
                                                for b in args.batches))


if __name__ == "__main__":
    main()
