"""Where the transformers sampler's time goes: tokens/s of `HFSampler.generate` against a
plain `model.generate` on the same batch, in the same process (the baseline, ratio 1.00).

Written after the first GPU check (H200, 2026-12-04): the rollout there ran at 635-806
tok/s for 256 episodes, far below what a 135M model does on that card. The cases below
split the sampler's extras apart: its CPU-side inputs, its stop-string criteria and its
per-row seeded sampling (`PerRowSeededSampling`, which draws each row's noise on the CPU
with its own generator, row by row, every step), so a fix can be measured before and after.

    python bench/hf_sampler_overhead.py                                   # here: tiny random model, CPU
    python bench/hf_sampler_overhead.py --model .gpucheck/smollm2-135m-shape --batch 256   # on a GPU
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random",
                        help="a whalekit model name, or a HF model dir (one without weights gets random ones)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    args = parser.parse_args()

    import torch

    from whalekit.infra.cpu_info import cpu_kind
    from whalekit.samplers import GenerationRequest, HFSampler, SamplingParams
    from whalekit.samplers.models import cache_dir, load_model, load_tokenizer, resolve_model_dir

    device = "cuda" if torch.cuda.is_available() else "cpu"
    given = Path(args.model)
    if given.is_dir():
        from gpu_check import materialise
        path = given if list(given.glob("*.safetensors")) else materialise(given, cache_dir())
    else:
        path = resolve_model_dir(args.model)
    dtype = "bfloat16" if device == "cuda" else "float32"
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype).to(device).eval()
    sampler = HFSampler(model, tokenizer, max_batch_size=args.batch)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, vocab - 1, (args.prompt_tokens - (i % 8),), generator=generator).tolist()
               for i in range(args.batch)]

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def plain() -> int:
        """The baseline: left-padded inputs already on the device, greedy, nothing else."""
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), sampler.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), 1
        with torch.inference_mode():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                 max_new_tokens=args.new_tokens, pad_token_id=sampler.pad_id,
                                 eos_token_id=sorted(sampler.eos_ids), temperature=None, top_p=None, top_k=None)
        new = out[:, width:]
        return int((new != sampler.pad_id).sum())

    def through_sampler(params: SamplingParams, stop: list[str], seeded: bool) -> int:
        requests = [GenerationRequest(p, args.new_tokens, stop=list(stop), seed=i if seeded else None)
                    for i, p in enumerate(prompts)]
        return sum(len(c.token_ids) for c in sampler.generate(requests, params))

    stops = ["</answer>", "```output"]
    cases = [
        ("plain model.generate, greedy, inputs on the device (baseline)", plain),
        ("HFSampler, greedy", lambda: through_sampler(SamplingParams(0.0), [], False)),
        ("HFSampler, greedy + stop strings", lambda: through_sampler(SamplingParams(0.0), stops, False)),
        ("HFSampler, per-row seeded sampling (T 1, top_k 20)", lambda: through_sampler(SamplingParams(), [], True)),
        ("HFSampler, seeded sampling + stop strings (what rollouts do)",
         lambda: through_sampler(SamplingParams(), stops, True)),
    ]
    where = torch.cuda.get_device_name() if device == "cuda" else cpu_kind()
    print(f"device {device} ({where}), model {args.model}, {dtype}, batch {args.batch}, "
          f"{args.prompt_tokens} prompt / {args.new_tokens} new tokens, torch {torch.__version__}")
    for _, run in cases:  # warm-up: kernels, allocator, stop-criteria cache
        run()
    baseline = None
    for label, run in cases:
        sync()
        start = time.perf_counter()
        tokens = run()
        sync()
        rate = tokens / (time.perf_counter() - start)
        baseline = baseline or rate
        print(f"{rate:10.0f} tok/s  {rate / baseline:5.2f}x baseline  {label}")


if __name__ == "__main__":
    main()
