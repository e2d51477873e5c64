"""whalekit's RSFT step against TRL's SFTTrainer on identical accepted trajectories.

Why: the weight phase must be no slower than the standard tool. Both trainers get the
same token ids (built once from a fixed seed), the same loss mask (generated tokens
only), the same model, LoRA config and batch; the first batch's loss must agree to 1e-4
(both divide the summed CE by the generated tokens of the whole batch), and one epoch of
each is timed in the same process, so the ratio is robust to a noisy shared machine.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_vs_trl.py --batches 4
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_vs_trl.py --model tiny-random --modes lora
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from whalekit.domains.toy import ToyDomain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.models import Policy, load_model, load_policy
from whalekit.types import Trajectory, Turn
from whalekit.weights.rsft import RSFTTrainer, bf16_supported
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import token_normalised_loss, training_sequences

TOLERANCE = 1e-4


@dataclass
class EpochResult:
    trainer: str
    first_loss: float  # loss of the first batch, before any optimiser step
    first_tokens: int  # generated tokens the first batch's loss is normalised by
    tokens: int  # all tokens (prompt + completion) the epoch pushed through the model
    step_seconds: list[float] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / sum(self.step_seconds)

    @property
    def steady_tokens_per_second(self) -> float:
        """Without the first step, which pays one-off allocator and kernel warm-up."""
        if len(self.step_seconds) < 2:
            return self.tokens_per_second
        return self.tokens * (len(self.step_seconds) - 1) / len(self.step_seconds) / sum(self.step_seconds[1:])


def fixed_trajectories(vocab_size: int, count: int, seq_len: int, seed: int = 0) -> list[Trajectory]:
    """Accepted one-turn trajectories of exactly `seq_len` tokens from fixed ids. The
    prompt/completion split varies per trajectory, so a per-sequence mean would give a
    different loss than the token-normalised one and the check can tell them apart."""
    rng = random.Random(seed)
    low = min(256, vocab_size // 2)  # stay clear of the special tokens at the start of the vocabulary
    trajectories = []
    for index in range(count):
        prompt_len = rng.randint(seq_len // 4, 3 * seq_len // 4)
        ids = [rng.randrange(low, vocab_size) for _ in range(seq_len)]
        turn = Turn(prompt_ids=ids[:prompt_len], completion_ids=ids[prompt_len:], text="", finish_reason="length")
        trajectories.append(Trajectory(f"fixed-{index}", "toy", "bench", 0, turns=[turn], correct=True, reward=1.0))
    return trajectories


def trl_rows(trajectories: list[Trajectory]) -> list[dict[str, list[int]]]:
    """The same turns as TRL's pre-tokenised format: the mask marks the generated tokens."""
    rows = []
    for traj in trajectories:
        for turn in traj.turns:
            rows.append({"input_ids": list(turn.prompt_ids) + list(turn.completion_ids),
                         "completion_mask": [0] * len(turn.prompt_ids) + [1] * len(turn.completion_ids)})
    return rows


def whalekit_trainer(policy: Policy, lora: bool, autocast: bool, batch: int, seq_len: int,
                     learning_rate: float) -> RSFTTrainer:
    domain = ToyDomain()
    config = RSFTConfig(batch_problems=batch, samples_per_problem=1, micro_batch_sequences=batch, max_seq_len=seq_len,
                        lora=lora, bf16_autocast=autocast, learning_rate=learning_rate, warmup_steps=1)
    return RSFTTrainer(policy, domain, domain.load_splits(4, 0, 0).train, config, RolloutBudget(0))


def run_whalekit(policy: Policy, trajectories: list[Trajectory], lora: bool, autocast: bool, batch: int,
                 seq_len: int, learning_rate: float) -> tuple[EpochResult, float]:
    """One epoch of `RSFTTrainer.update` (the real step: sequences, token-normalised loss,
    clipping, AdamW). The sampler sync is timed once on its own and kept out of the epoch,
    since TRL has no sampler to sync. Returns the epoch and the sync's seconds."""
    trainer = whalekit_trainer(policy, lora, autocast, batch, seq_len, learning_rate)
    start = time.perf_counter()
    trainer.sync_sampler()
    sync_seconds = time.perf_counter() - start
    trainer.sync_sampler = lambda: None  # type: ignore[method-assign]
    result = EpochResult("whalekit", 0.0, 0, 0)
    for first in range(0, len(trajectories), batch):
        accepted = trajectories[first:first + batch]
        start = time.perf_counter()
        loss, trained_tokens, dropped, _ = trainer.update(accepted)
        result.step_seconds.append(time.perf_counter() - start)
        if dropped:
            raise RuntimeError(f"{dropped} turns exceeded max_seq_len={seq_len}: the trainers would see different data")
        if first == 0:
            result.first_loss, result.first_tokens = float(loss), trained_tokens
        result.tokens += sum(len(t.prompt_ids) + len(t.completion_ids) for traj in accepted for t in traj.turns)
    return result, sync_seconds


def trl_trainer(policy: Policy, trajectories: list[Trajectory], lora: bool, autocast: bool, batch: int,
                seq_len: int, learning_rate: float, output_dir: str, max_steps: int = -1) -> Any:
    """TRL's SFTTrainer set up to do the same work as whalekit: completion-only loss from a
    pre-tokenised `completion_mask`, the same LoRA config, AdamW with the same lr, clipping
    and batch, no gradient accumulation, in-order batches, and no gradient checkpointing
    (TRL's default turns it on; whalekit does not recompute activations)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    class RecordingSFTTrainer(SFTTrainer):
        """Keeps every training loss unrounded, with the token count it was divided by."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            value = loss[0] if return_outputs else loss
            if model.training:
                self.recorded.append((value.item(), int(num_items_in_batch) if num_items_in_batch is not None else -1))
            return loss

    args = SFTConfig(
        output_dir=output_dir, per_device_train_batch_size=batch, gradient_accumulation_steps=1, num_train_epochs=1,
        max_steps=max_steps, learning_rate=learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, bf16=autocast, fp16=False, use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False, completion_only_loss=True, max_length=seq_len, packing=False,
        padding_free=False, train_sampling_strategy="sequential", dataloader_num_workers=0, logging_strategy="no",
        save_strategy="no", report_to="none", seed=0, disable_tqdm=True)
    peft_config = (LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                              task_type="CAUSAL_LM") if lora else None)
    timer = StepTimer()
    trainer = RecordingSFTTrainer(model=load_model(policy.path), args=args, processing_class=policy.tokenizer,
                                  train_dataset=Dataset.from_list(trl_rows(trajectories)), peft_config=peft_config,
                                  callbacks=[timer])
    trainer.recorded, trainer.timer = [], timer
    return trainer


def run_trl(policy: Policy, trajectories: list[Trajectory], lora: bool, autocast: bool, batch: int, seq_len: int,
            learning_rate: float) -> EpochResult:
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = trl_trainer(policy, trajectories, lora, autocast, batch, seq_len, learning_rate, output_dir)
        trainer.train()
    if len(trainer.timer.seconds) != -(-len(trajectories) // batch):
        raise RuntimeError(f"TRL took {len(trainer.timer.seconds)} steps for {len(trajectories)} sequences")
    first_loss, first_tokens = trainer.recorded[0]
    tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for traj in trajectories for t in traj.turns)
    return EpochResult("trl", first_loss, first_tokens, tokens, list(trainer.timer.seconds))


def fp32_first_batch_losses(policy: Policy, trajectories: list[Trajectory], batch: int,
                            seq_len: int) -> tuple[float, float]:
    """The first batch's loss in float32 through each trainer's own loss code (TRL's
    collator + fused-head `compute_loss` with the `num_items_in_batch` its loop would pass;
    whalekit's `token_normalised_loss`), without the rounding bf16 adds to both."""
    import torch

    first = trajectories[:batch]
    sequences = [s for traj in first for s in training_sequences(traj, seq_len)[0]]
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = trl_trainer(policy, first, False, False, batch, seq_len, 1e-4, output_dir)
        inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        num_items = (inputs["labels"][..., 1:] != -100).sum()  # how Trainer counts it for a causal LM
        trainer.model.train()
        with torch.no_grad():
            trl_loss = trainer.compute_loss(trainer.model, inputs, num_items_in_batch=num_items).item()
        model = trainer.model
    wk_loss, _ = token_normalised_loss(model, sequences, batch, policy.tokenizer.pad_token_id, backward=False)
    return trl_loss, wk_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, default=4, help="batches in the epoch")
    parser.add_argument("--batch", type=int, default=8, help="sequences per batch")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--modes", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    parser.add_argument("--lr", type=float, default=2e-4)
    args = parser.parse_args()

    import datasets
    import torch
    import transformers

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    policy = load_policy(args.model)
    autocast = bf16_supported()
    trajectories = fixed_trajectories(len(policy.tokenizer), args.batches * args.batch, args.seq_len)
    print(f"model={args.model} torch_threads={torch.get_num_threads()} bf16_autocast={autocast} "
          f"epoch={args.batches} batches x {args.batch} seqs x {args.seq_len} tokens")

    trl_fp32, wk_fp32 = fp32_first_batch_losses(policy, trajectories, args.batch, args.seq_len)
    print(f"first-batch loss fp32:  whalekit={wk_fp32:.6f} trl={trl_fp32:.6f} |diff|={abs(wk_fp32 - trl_fp32):.2e}")
    failures = [] if abs(wk_fp32 - trl_fp32) <= TOLERANCE else ["fp32 loss"]

    for mode in args.modes:
        lora = mode == "lora"
        wk, sync_seconds = run_whalekit(policy, trajectories, lora, autocast, args.batch, args.seq_len, args.lr)
        trl = run_trl(policy, trajectories, lora, autocast, args.batch, args.seq_len, args.lr)
        diff = abs(wk.first_loss - trl.first_loss)
        label = f"{mode}{' r=16' if lora else ''} {'bf16 autocast' if autocast else 'fp32'}"
        print(f"[{label}] first-batch loss: whalekit={wk.first_loss:.6f} ({wk.first_tokens} tokens) "
              f"trl={trl.first_loss:.6f} ({trl.first_tokens} tokens) |diff|={diff:.2e}")
        for result in (wk, trl):
            print(f"[{label}] {result.trainer:8s} {result.tokens_per_second:7.1f} tok/s over the epoch, "
                  f"{result.steady_tokens_per_second:7.1f} tok/s after step 1; "
                  f"steps (s): {' '.join(f'{s:.2f}' for s in result.step_seconds)}")
        print(f"[{label}] ratio whalekit/trl = {wk.tokens_per_second / trl.tokens_per_second:.3f} (epoch), "
              f"{wk.steady_tokens_per_second / trl.steady_tokens_per_second:.3f} (after step 1); "
              f"sampler sync (not in the epoch) {sync_seconds:.2f} s/step")
        if wk.first_tokens != trl.first_tokens:
            failures.append(f"{mode} token count")
        if diff > TOLERANCE:
            failures.append(f"{mode} bf16 loss")
    print("loss agreement to 1e-4:", "ok" if not failures else "FAILED: " + ", ".join(failures))


if __name__ == "__main__":
    main()
