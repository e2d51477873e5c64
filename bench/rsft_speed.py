"""The RSFT step's savings, timed against the recorded runs' step in the same process.

Why: on a CPU the weight phase is about half of a WHALE run (the cpu records: 34-62 % of a
run's wall time was training). What a step did not need to compute, each giving the same loss
and gradients up to float rounding (tests/test_rsft.py, tests/test_shared_prefix.py):
  * packed turns: turn k+1's prompt holds turn k's prompt and completion; one sequence per
    episode with the completions labelled (the authors' verl agent loop) runs it once;
  * trained positions only: the vocabulary projection (49k x 576 for SmolLM2-135M) runs only
    where a token is trained (a few percent of an RSFT batch's positions);
  * a shared prompt prefix (`rsft.shared_prefix_tokens`): a problem's accepted trajectories
    begin with its prompt, which is run once, its keys and values attended to by each
    continuation and its gradient summed over them;
  * eager attention (`rsft.attention: auto` on CPU): SDPA's CPU kernels are slower at these
    shapes, most of all with the padding mask and a cache;
  * checkpointing only where it saves memory (`rsft.checkpoint_min_tokens`).

The recorded runs (cpu-repro-2, commit 8e740fb) trained with the first two, SDPA and no
checkpointing; the code's default since turns checkpointing on. This bench builds accepted
episodes of a measured shape from fixed ids, `--per-problem` of them sharing a problem's
prompt, and times forward + backward of `token_normalised_loss` on the LoRA model the trainer
builds, each variant interleaved over `--repeats` rounds so a noisy machine slows all alike. It
prints each variant's step time, the tokens the recorded step pushes through the model per
second of it (the same tokens for every variant: what the step trains on), and the ratio to the
recorded runs' step.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_speed.py                  # search QA's shape
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_speed.py --per-problem 2
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_speed.py --shape chess
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_speed.py --model tiny-random --repeats 1

Shapes (prompt and completion tokens per turn, from test evaluations of the cpu preset's
h0_cpu with SmolLM2-135M): search QA 188+8 then 277+7 (2 turns: the second prompt adds
the retrieved passage); chess one turn.
"""

from __future__ import annotations

import argparse
import random
import time
from statistics import median
from typing import Any

from whalekit.domains.toy import ToyDomain
from whalekit.infra.cpu_info import cpu_kind
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.models import load_policy
from whalekit.types import Trajectory, Turn
from whalekit.weights.rsft import RSFTTrainer, bf16_supported
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import packed_training_sequences, shared_prefix_groups, token_normalised_loss

# (prompt tokens, completion tokens) per turn; each prompt extends the previous turn's
# prompt and completion (the harness keeps the history as sampled).
SHAPES: dict[str, list[tuple[int, int]]] = {
    "searchqa": [(188, 8), (277, 7)],
    "chess": [(240, 6)],
    "three-turn": [(160, 40), (260, 40), (360, 40)],
}


def episodes(shape: list[tuple[int, int]], count: int, vocab_size: int, per_problem: int = 1,
             seed: int = 0) -> list[Trajectory]:
    """`count` accepted episodes of `shape`, each `per_problem` consecutive ones sharing their
    problem's first prompt (G samples of one problem), the rest of their lengths jittered by up
    to 10 % so micro-batches pad as real ones do."""
    rng = random.Random(seed)
    low = min(256, vocab_size // 2)
    out: list[Trajectory] = []
    prompt: list[int] = []
    for index in range(count):
        if index % per_problem == 0:
            prompt = [rng.randrange(low, vocab_size) for _ in range(int(shape[0][0] * rng.uniform(0.9, 1.1)))]
        jitter = rng.uniform(0.9, 1.1)
        turns, ids = [], list(prompt)
        for number, (prompt_tokens, completion) in enumerate(shape):
            while number and len(ids) < int(prompt_tokens * jitter):  # tool text between turns
                ids.append(rng.randrange(low, vocab_size))
            done = [rng.randrange(low, vocab_size) for _ in range(max(1, int(completion * jitter)))]
            turns.append(Turn(prompt_ids=list(ids), completion_ids=done, text="", finish_reason="eos"))
            ids += done
        out.append(Trajectory(f"e{index}", "toy", "bench", 0, turns=turns, correct=True, reward=1.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--shape", default="searchqa", choices=sorted(SHAPES))
    parser.add_argument("--episodes", type=int, default=4, help="accepted episodes per optimiser step (the cpu "
                        "preset's rsft.minibatch_trajectories)")
    parser.add_argument("--per-problem", type=int, default=4, help="of them, how many share a problem's prompt "
                        "(1: none share; 4: one problem's G = 4 samples all accepted)")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward (rsft.micro_batch_sequences)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    policy = load_policy(args.model)
    autocast = bf16_supported()
    domain = ToyDomain()
    config = RSFTConfig(lora=True, bf16_autocast=autocast, micro_batch_sequences=args.micro_batch,
                        gradient_checkpointing=True)  # each variant turns it on or off per micro-batch
    trainer = RSFTTrainer(policy, domain, domain.load_splits(4, 0, 0).train, config, RolloutBudget(0))
    model, pad_id = trainer.model, trainer.pad_id
    batch = episodes(SHAPES[args.shape], args.episodes, len(policy.tokenizer), args.per_problem)
    packed = [s for t in batch for s in packed_training_sequences(t, 100_000)[0]]
    never = 1 << 30  # checkpoint_min_tokens: no micro-batch is that large
    # name: (attention, loss options)
    variants: dict[str, tuple[str, dict[str, Any]]] = {
        "recorded runs: packed, trained positions, sdpa": ("sdpa", {"checkpoint_min_tokens": never}),
        "code default before: + checkpointing": ("sdpa", {"checkpoint_min_tokens": 0}),
        "eager attention": ("eager", {"checkpoint_min_tokens": never}),
        "shared prefix (sdpa)": ("sdpa", {"checkpoint_min_tokens": never, "shared_prefix_tokens": 32}),
        "shared prefix + eager (cpu-v3)": ("eager", {"checkpoint_min_tokens": never, "shared_prefix_tokens": 32}),
    }
    tokens = sum(len(ids) for ids, _ in packed)
    groups = shared_prefix_groups(packed, 32)
    computed = tokens - sum(prefix * (len(members) - 1) for prefix, members in groups)
    print(f"model={args.model} cpu={cpu_kind()} torch_threads={torch.get_num_threads()} bf16_autocast={autocast} "
          f"shape={args.shape} {SHAPES[args.shape]} episodes={args.episodes} per_problem={args.per_problem} "
          f"micro_batch={args.micro_batch}: {tokens} tokens a step, {computed} with the prefixes shared")
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    losses: dict[str, float] = {}
    model.train()
    base_model = model.get_base_model()
    for _ in range(args.repeats + 1):  # the first round warms up allocator and kernels, not counted
        for name, (attention, options) in variants.items():
            base_model.set_attn_implementation(attention)
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            loss, _tokens = token_normalised_loss(model, packed, args.micro_batch, pad_id, autocast, **options)
            seconds[name].append(time.perf_counter() - started)
            losses[name] = loss
    base = median(seconds[next(iter(variants))][1:])
    for name in variants:
        step = median(seconds[name][1:])
        print(f"{name:45s} {step:7.3f} s/step (median of {args.repeats})  {tokens / step:7.0f} tokens/s  "
              f"ratio to the recorded runs' {base / step:.2f}x  loss {losses[name]:.6f}")


if __name__ == "__main__":
    main()
