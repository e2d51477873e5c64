"""RSFT's settings and records: what a weight phase is asked to do (`RSFTConfig`, every
field checked when it is made), what each sampled batch did (`BatchRecord`, the
`rsft_batch` run event) and where the trainer is (`TrainerState`, saved in checkpoints).

They live apart from the trainer so the run config, the driver and the front ends can
read them without importing the training stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from whalekit.samplers.base import SamplingParams

TRAIN_DTYPES = ("auto", "float32", "bfloat16")
BACKENDS = ("peft", "unsloth", "auto")
COMPUTE_DTYPES = ("bfloat16", "float32")  # of sharded ranks' gathered weights (weights.distributed.sharded_training)
ATTENTIONS = ("sdpa", "eager", "auto")  # the trainer model's attention (RSFTConfig.attention)
TRAINER_LAUNCHERS = ("spawn", "ray")  # how sharded trainer ranks start (weights.distributed.trainer_ranks)


def check_choice(field: str, value: str, choices: tuple[str, ...]) -> None:
    """A ValueError naming the choices when `value` is not one of them: one wording for the
    config's own check and the trainer's resolution of "auto"."""
    if value not in choices:
        raise ValueError(f"{field} {value!r}: use one of {', '.join(choices)}")


@dataclass
class RSFTConfig:
    batch_problems: int = 8  # training problems per sampled batch
    samples_per_problem: int = 8  # G: trajectories sampled per problem
    learning_rate: float = 2e-4  # peak learning rate (AdamW)
    warmup_steps: int = 2  # linear warm-up, then constant: WHALE calls the trainer in short stages
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    # Accepted trajectories per optimiser step and data-parallel rank: one step covers
    # minibatch_trajectories x data_parallel of them, ceil(accepted / that) steps per sampled
    # batch, as the authors' online RSFT (sft_mini_batch_size 64 on each rank); 0 = one step
    # per sampled batch.
    minibatch_trajectories: int = 64
    # Data-parallel ranks the authors' trainer split a batch across (their launchers' trainer
    # GPUs): the global mini-batch size follows from it, whatever `trainer_ranks` is.
    data_parallel: int = 1
    # Trainer processes: 1 = the in-process trainer (the records' behaviour); N > 1 = N FSDP2
    # ranks (whalekit.weights.distributed.trainer_ranks; one per GPU on CUDA), float32 master weights sharded N ways,
    # `sharded_compute_dtype` in forward and backward: full fine-tuning only (lora: false).
    trainer_ranks: int = 1
    sharded_compute_dtype: str = "bfloat16"  # bfloat16 (the paper's verl setting) | float32
    # With trainer_ranks > 1: the sampler's weight sync arrives in buckets of whole decoder layers of
    # about this many MiB (float32), gathered from the shards one bucket at a time, so the driver
    # holds a bucket, not the model (8 GB at 2B); on samplers that take buckets (hf, vllm; the Ray
    # backend's take the whole state dict). 0: the whole gathered state dict at once.
    sync_bucket_mb: float = 512.0
    # With trainer_ranks > 1 on CUDA: the GPU index of each rank (None: rank r on cuda:r, so rank 0
    # shares cuda:0 with a local vLLM sampler). E.g. [1, 2, 3, 4, 5, 6, 7]: the sampler keeps cuda:0
    # to itself and 7 ranks train on the others (docs/gpu.md). Ignored on CPU (gloo ranks).
    trainer_devices: list[int] | None = None
    # How ranks start: "spawn" (processes beside the driver, rendezvous on 127.0.0.1) | "ray" (Ray
    # actors, one GPU each on CUDA, on any node of the run's cluster: whalekit.weights.distributed.ray_trainer_ranks;
    # Ray assigns their GPUs, so trainer_devices does not apply).
    trainer_launcher: str = "spawn"
    micro_batch_sequences: int = 8  # sequences per forward pass; gradients accumulate over a mini-batch
    # Padded tokens per forward pass (sequences x the longest of them), as well as the count
    # above: bounds a micro-batch's activations whatever the harness's prompt length. None: by
    # count only (the records' behaviour; a cap regroups sequences, so float rounding differs).
    micro_batch_tokens: int | None = None
    # Recompute each decoder layer's activations in backward instead of keeping them (peft and
    # full fine-tuning; non-reentrant, `use_cache=False`; unsloth has its own): a layer keeps
    # its input, about 2.3 KB a token for SmolLM2-135M instead of ~30-45 KB, for about a third
    # more train time. Losses and gradients are bit-identical to training without it (measured
    # fp32 and bf16 autocast: tests/test_rsft_memory.py).
    gradient_checkpointing: bool = True
    # With checkpointing on: only micro-batches of at least this many padded tokens are
    # checkpointed; smaller ones keep their activations (little memory, no recomputation).
    # 0: every micro-batch (the records' behaviour).
    checkpoint_min_tokens: int = 0
    # Sequences of a mini-batch that begin with the same untrained ids for at least this many
    # tokens (a problem's G trajectories share its prompt) run that prefix once
    # (rsft_loss.shared_prefix_loss): same loss and gradients up to float rounding, fewer
    # tokens through the model. None: every sequence whole (the records' behaviour).
    shared_prefix_tokens: int | None = None
    # The trainer model's attention (transformers' attn_implementation): "sdpa" (the records'),
    # "eager", or "auto" (eager on CPU, where bench/rsft_speed.py measured it faster at RSFT's
    # shapes; sdpa on CUDA). Same loss up to float rounding.
    attention: str = "sdpa"
    # True: the right-padding attention mask is passed to the model (the records' behaviour).
    # False: dropped for causal decoders whose positions ignore it (rsft_loss.
    # CAUSAL_POSITION_MODEL_TYPES; exact for the real positions the loss reads), so attention
    # builds no (B, 1, L, L) mask; SDPA then takes its causal kernel, and gradients differ in
    # float rounding (relative 4e-7 fp32, 7e-3 bf16 autocast), losses not.
    padding_mask: bool = True
    # Trained positions whose cross-entropy is computed at once (rsft_loss.chunked_cross_entropy:
    # each chunk's float32 logits recomputed in backward), so a micro-batch never holds
    # (tokens x vocab) float32 logits: at Qwen3.5's 248,320-token vocabulary 8 x 8,192 tokens
    # would be 65 GB. None: all at once (the records' behaviour; chunks change float rounding).
    loss_chunk_tokens: int | None = None
    max_seq_len: int = 1024  # a turn longer than this (prompt + completion) is dropped from training, and counted
    lora: bool = True  # LoRA via peft; False = full fine-tuning
    lora_r: int = 16
    lora_alpha: int = 32
    bf16_autocast: bool = True  # used only where the CPU/GPU supports bf16
    # Trainer weights: "auto" = bfloat16 on CUDA (full fine-tuning of 2B/4B models fits next to
    # vLLM; bf16 parameters are updated with stochastic rounding, see BF16AdamW), float32 on CPU.
    train_dtype: str = "auto"  # auto | float32 | bfloat16
    # LoRA backend: "peft"; "unsloth" (FastLanguageModel; CUDA only, `pip install whalekit[gpu]`);
    # "auto" = unsloth where it imports and CUDA is present, else peft with one logged warning.
    backend: str = "peft"  # peft | unsloth | auto
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the behaviour policy's (T 1, top_k 20)
    max_context_tokens: int = 4096  # engine limit per episode
    reward_window: int = 4  # batches in the sliding-window mean training reward
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.batch_problems, self.samples_per_problem, self.micro_batch_sequences, self.max_seq_len) <= 0:
            raise ValueError("RSFTConfig sizes must be positive")
        if self.minibatch_trajectories < 0:
            raise ValueError("minibatch_trajectories must be >= 0 (0: one optimiser step per sampled batch)")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens <= 0:
            raise ValueError("micro_batch_tokens must be positive or None (None: micro-batches by sequence count only)")
        if self.shared_prefix_tokens is not None and self.shared_prefix_tokens <= 0:
            raise ValueError("shared_prefix_tokens must be positive or None (None: every sequence whole)")
        if self.checkpoint_min_tokens < 0:
            raise ValueError("checkpoint_min_tokens must be >= 0 (0: every micro-batch checkpointed)")
        check_choice("attention", self.attention, ATTENTIONS)
        if self.loss_chunk_tokens is not None and self.loss_chunk_tokens <= 0:
            raise ValueError("loss_chunk_tokens must be positive or None (None: the whole micro-batch's loss at once)")
        if self.sync_bucket_mb < 0:
            raise ValueError(f"sync_bucket_mb must be >= 0 (0: the whole state dict at once), "
                             f"got {self.sync_bucket_mb}")
        if self.data_parallel < 1 or self.trainer_ranks < 1:
            raise ValueError("data_parallel and trainer_ranks must be >= 1")
        check_choice("trainer_launcher", self.trainer_launcher, TRAINER_LAUNCHERS)
        if self.trainer_launcher == "ray" and self.trainer_devices is not None:
            raise ValueError("trainer_devices places spawned ranks; Ray assigns its actors' GPUs (trainer_launcher: "
                             "ray): drop one of the two")
        if self.trainer_devices is not None:
            devices = list(self.trainer_devices)
            if len(devices) != self.trainer_ranks or len(set(devices)) != len(devices) or min(devices) < 0:
                raise ValueError(f"trainer_devices must name {self.trainer_ranks} distinct GPU indices, one per "
                                 f"trainer rank (rsft.trainer_ranks), got {self.trainer_devices}")
            self.trainer_devices = devices
        check_choice("sharded_compute_dtype", self.sharded_compute_dtype, COMPUTE_DTYPES)
        if self.trainer_ranks > 1 and self.lora:
            raise ValueError(f"trainer_ranks={self.trainer_ranks} shards full fine-tuning (LoRA under FSDP2 is "
                             "untested here): set rsft.lora=false, or rsft.trainer_ranks=1 for LoRA")
        if self.learning_rate <= 0 or self.reward_window <= 0:
            raise ValueError("learning_rate and reward_window must be positive")
        self.sampling = SamplingParams.of(self.sampling)
        check_choice("train_dtype", self.train_dtype, TRAIN_DTYPES)
        check_choice("backend", self.backend, BACKENDS)
        if self.backend == "unsloth" and not self.lora:
            raise ValueError("backend='unsloth' accelerates LoRA here; set lora=true or backend='peft'")

    def stage_batch_problems(self, n_train: int, budget_left: int, epochs: float | None, done: int) -> int:
        """Problems the next batch of a weight stage takes: the one rule of `RSFTTrainer.train`,
        the driver's weight step and the cost model (whalekit.report.cost_model). What is left of
        the stage's `epochs` of the `n_train` training problems after the `done` it has taken
        (None: an adaptive stage, a whole batch each time), at most a batch, and no more than
        `budget_left` rollouts can sample `samples_per_problem` times. 0 or less: the stage is
        done or the budget is spent."""
        wanted = self.batch_problems if epochs is None else round(epochs * n_train) - done
        return min(wanted, self.batch_problems, budget_left // self.samples_per_problem)


@dataclass
class BatchRecord:
    """What one RSFT batch did; the adaptive schedule windows `reward` over its stage."""

    step: int  # optimiser steps taken after this batch
    policy_version: int  # sampler weights version that produced the batch (behaviour policy)
    harness_id: str
    epoch_position: float  # problems consumed so far / training-set size
    sampled: int
    accepted: int
    reward: float  # accepted fraction of this batch
    reward_window_mean: float
    loss: float | None  # token-normalised loss (None when nothing was accepted)
    trained_tokens: int
    dropped_turns: int  # accepted turns longer than max_seq_len
    sample_seconds: float
    train_seconds: float


@dataclass
class TrainerState:
    problems_seen: int = 0  # cursor into the epoch-wise shuffled training set
    step: int = 0
    batches: int = 0
    rewards: list[float] = field(default_factory=list)
    sampled: int = 0  # rollouts this trainer has charged to the budget, for reconciling after a kill

def mean_reward(records: list[BatchRecord]) -> float:
    return sum(r.accepted for r in records) / max(1, sum(r.sampled for r in records)) if records else math.nan
