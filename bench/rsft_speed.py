"""The RSFT step's two savings, timed against the step without them in the same process.

Why: on a CPU the weight phase is most of a run (search QA, weight_only, AMD EPYC AVX2:
76 % of the wall time was training). Two things a step did not need to compute:
  * packed turns: turn k+1's prompt holds turn k's prompt and completion, so training
    each turn as its own sequence runs that prefix again; one sequence per episode with
    the completions labelled (the authors' verl agent loop) gives the same loss;
  * trained positions only: the vocabulary projection (49k x 576 for SmolLM2-135M) and
    its fp32 softmax ran on every position, though an RSFT batch trains on a few percent.

Both give the same loss and gradients (tests/test_rsft.py checks it to 1e-5). This bench
builds accepted episodes of a measured shape from fixed ids, and times forward + backward
of `token_normalised_loss` on the LoRA model the trainer builds: the baseline (per-turn
sequences, every position's logits), each saving alone, and both, interleaved over
`--repeats` rounds so a noisy machine slows all alike. It prints tokens pushed through the
model and the ratio of each to the baseline.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_speed.py                  # search QA's shape
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

from whalekit.domains.toy import ToyDomain
from whalekit.infra.cpu_info import cpu_kind
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.models import load_policy
from whalekit.types import Trajectory, Turn
from whalekit.weights.rsft import RSFTTrainer, bf16_supported
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import packed_training_sequences, token_normalised_loss, training_sequences

# (prompt tokens, completion tokens) per turn; each prompt extends the previous turn's
# prompt and completion (the harness keeps the history as sampled).
SHAPES: dict[str, list[tuple[int, int]]] = {
    "searchqa": [(188, 8), (277, 7)],
    "chess": [(240, 6)],
    "three-turn": [(160, 40), (260, 40), (360, 40)],
}


def episodes(shape: list[tuple[int, int]], count: int, vocab_size: int, seed: int = 0) -> list[Trajectory]:
    """`count` accepted episodes of `shape`, their lengths jittered by up to 10 % so
    micro-batches pad as real ones do."""
    rng = random.Random(seed)
    low = min(256, vocab_size // 2)
    out = []
    for index in range(count):
        jitter = rng.uniform(0.9, 1.1)
        turns, ids = [], [rng.randrange(low, vocab_size) for _ in range(int(shape[0][0] * jitter))]
        for prompt, completion in shape:
            while len(ids) < int(prompt * jitter):  # tool text between turns
                ids.append(rng.randrange(low, vocab_size))
            done = [rng.randrange(low, vocab_size) for _ in range(completion)]
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
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward (rsft.micro_batch_sequences)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    policy = load_policy(args.model)
    autocast = bf16_supported()
    domain = ToyDomain()
    config = RSFTConfig(lora=True, bf16_autocast=autocast, micro_batch_sequences=args.micro_batch)
    trainer = RSFTTrainer(policy, domain, domain.load_splits(4, 0, 0).train, config, RolloutBudget(0))
    model, pad_id = trainer.model, trainer.pad_id
    batch = episodes(SHAPES[args.shape], args.episodes, len(policy.tokenizer))
    per_turn = [s for t in batch for s in training_sequences(t, 100_000)[0]]
    packed = [s for t in batch for s in packed_training_sequences(t, 100_000)[0]]
    variants = {"baseline: per-turn sequences, every position's logits": (per_turn, False),
                "trained positions only": (per_turn, True),
                "packed turns": (packed, False),
                "packed turns + trained positions (whalekit)": (packed, True)}
    print(f"model={args.model} cpu={cpu_kind()} torch_threads={torch.get_num_threads()} bf16_autocast={autocast} "
          f"shape={args.shape} {SHAPES[args.shape]} episodes={args.episodes} micro_batch={args.micro_batch}")
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    losses: dict[str, float] = {}
    model.train()
    for _ in range(args.repeats + 1):  # the first round warms up allocator and kernels, not counted
        for name, (sequences, only) in variants.items():
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            loss, _tokens = token_normalised_loss(model, sequences, args.micro_batch, pad_id, autocast,
                                                  trained_positions_only=only)
            seconds[name].append(time.perf_counter() - started)
            losses[name] = loss
    base = median(seconds[next(iter(variants))][1:])
    for name, (sequences, _only) in variants.items():
        step = median(seconds[name][1:])
        print(f"{name:55s} {sum(len(ids) for ids, _ in sequences):6d} tokens  {step:7.3f} s/step (median of "
              f"{args.repeats})  ratio to baseline {step / base:.3f}  loss {losses[name]:.6f}")


if __name__ == "__main__":
    main()
