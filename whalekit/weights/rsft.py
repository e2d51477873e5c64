"""Online rejection-sampling fine-tuning (RSFT): the weight phase of WHALE.

For each batch of training problems: sample G trajectories per problem with the
sampler's weights as they were at the batch's start (the behaviour policy), keep those
the verifier accepts, take one optimiser step of supervised learning on the target model
with the loss on generated tokens only, then sync the new weights to the sampler. Its
settings and records are in `whalekit.weights.rsft_config`; the sequences it trains on and their
loss in `whalekit.weights.rsft_loss`.

    trainer = RSFTTrainer(policy, domain, splits.train, RSFTConfig(), budget)
    records = trainer.train(InProcessHarness(h0_source), epochs=0.2)
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import random
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from whalekit.domains.base import Domain
from whalekit.infra.cpu_info import cpu_has_native_bf16
from whalekit.infra.memory import release_freed_memory
from whalekit.infra.timing import phase
from whalekit.rollouts.budget import RSFT_PHASE, RolloutBudget
from whalekit.rollouts.engine import Episode, HarnessRuntime, RolloutConfig, RolloutSettings, rollout
from whalekit.samplers.base import AdapterSampler, PolicyLike
from whalekit.samplers.models import load_model
from whalekit.samplers.vllm_sync import shared_memory_dir
from whalekit.types import Task, Trajectory
from whalekit.weights.distributed.ray_trainer_ranks import RayTrainerRanks
from whalekit.weights.distributed.trainer_ranks import TrainerRanks
from whalekit.weights.rsft_config import (
    ATTENTIONS,
    BACKENDS,
    TRAIN_DTYPES,
    BatchRecord,
    RSFTConfig,
    TrainerState,
    check_choice,
)
from whalekit.weights.rsft_loss import packed_training_sequences, token_normalised_loss

UNSLOTH_HINT = "pip install 'whalekit[gpu]' (CUDA Linux machines)"
log = logging.getLogger(__name__)


def bf16_supported() -> bool:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return cpu_has_native_bf16()


def resolve_train_dtype(name: str, device_type: str, bf16_ok: bool = True) -> str:
    """The trainer's weight dtype: "auto" is bfloat16 on a CUDA device that supports it
    (full fine-tuning of 2B/4B models beside vLLM), float32 elsewhere (CPU: exact, and
    bf16 matmuls are slow without AMX)."""
    check_choice("train_dtype", name, TRAIN_DTYPES)
    if name != "auto":
        return name
    return "bfloat16" if device_type == "cuda" and bf16_ok else "float32"


def resolve_attention(name: str, device_type: str) -> str:
    """The trainer's attention implementation: "auto" is eager on CPU (faster than SDPA's CPU
    kernels at RSFT's shapes: bench/rsft_speed.py) and sdpa elsewhere."""
    check_choice("attention", name, ATTENTIONS)
    if name != "auto":
        return name
    return "eager" if device_type == "cpu" else "sdpa"


def resolve_backend(requested: str, lora: bool, cuda: bool) -> str:
    """"peft" or "unsloth". unsloth is imported lazily and only where it can run (CUDA);
    "auto" falls back to peft with one logged warning, an explicit "unsloth" that cannot
    run is an ImportError saying how to install it."""
    check_choice("backend", requested, BACKENDS)
    if requested == "peft" or not lora:  # unsloth accelerates the LoRA path only
        return "peft"
    why = None
    try:
        installed = importlib.util.find_spec("unsloth") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        why = "the package 'unsloth' is not installed"
    elif not cuda:
        why = "there is no CUDA device (unsloth runs on CUDA GPUs only)"
    else:
        try:
            importlib.import_module("unsloth")
        except Exception as exc:  # unsloth raises more than ImportError when it cannot patch
            why = f"'import unsloth' failed ({type(exc).__name__}: {exc})"
    if why is None:
        return "unsloth"
    if requested == "unsloth":
        raise ImportError(f"RSFT backend 'unsloth' requested, but {why}: {UNSLOTH_HINT}, or set rsft.backend=peft")
    log.warning("RSFT backend 'auto': %s; training LoRA with peft instead (for unsloth: %s)", why, UNSLOTH_HINT)
    return "peft"


def _unsloth_lora(path: Path, dtype: str, config: RSFTConfig) -> Any:
    import torch
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(model_name=str(path), max_seq_length=config.max_seq_len,
                                                 dtype=getattr(torch, dtype), load_in_4bit=False)
    return FastLanguageModel.get_peft_model(
        model, r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, bias="none",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        use_gradient_checkpointing="unsloth", random_state=config.seed)


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute each decoder layer in backward (transformers' non-reentrant checkpointing);
    the embedding's output requires grad so a frozen-embedding (LoRA) model still has a
    gradient path into the first checkpointed layer. Same losses and gradients, bit for bit:
    the recomputation runs the same operations on the same inputs."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()


class RSFTTrainer:
    def __init__(self, policy: PolicyLike, domain: Domain, train_tasks: list[Task], config: RSFTConfig,
                 budget: RolloutBudget, device: str | None = None, settings: RolloutSettings | None = None):
        import torch

        if not train_tasks:
            raise ValueError("RSFT needs at least one training task")
        self.policy, self.domain, self.tasks, self.config, self.budget = policy, domain, train_tasks, config, budget
        self.sampler = policy.sampler
        self.settings = settings  # the run's generation limits and rollout backend (None: the config's alone)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.train_dtype = resolve_train_dtype(config.train_dtype, self.device.type, bf16_supported())
        self.backend = resolve_backend(config.backend, config.lora, self.device.type == "cuda")
        torch.manual_seed(config.seed)  # LoRA's initial A matrices: the same run starts from the same adapter
        self.ranks: TrainerRanks | RayTrainerRanks | None = None  # trainer_ranks > 1: sharded ranks hold the weights
        self.model: Any = None  # the in-process model (peft or transformers); None on sharded ranks
        if config.trainer_ranks > 1:
            self.autocast = False
            launch = RayTrainerRanks if config.trainer_launcher == "ray" else TrainerRanks
            self.ranks = launch(policy.path, config, policy.tokenizer.pad_token_id, self.device.type)
        else:
            self._build_in_process(policy.path, config)
        self.state = TrainerState()
        self.synced = False  # the sampler got every tensor once from this trainer (later LoRA syncs send fewer)
        self._adapter_dir: Path | None = None  # the adapter the sampler holds (adapter syncs only)
        self._adapter_cleanup: Callable[[], Any] | None = None  # removes that folder (now, or with the trainer)
        self.pad_id = policy.tokenizer.pad_token_id

    def _build_in_process(self, path: Path, config: RSFTConfig) -> None:
        """The trainer's model (LoRA or full), optimiser and warm-up schedule in this process."""
        import torch

        from whalekit.weights.optim import BF16AdamW, warmup_schedule

        if self.backend == "unsloth":
            model = _unsloth_lora(path, self.train_dtype, config)
        else:
            model = load_model(path, self.train_dtype).to(self.device)
            attention = resolve_attention(config.attention, self.device.type)
            if attention != model.config._attn_implementation:  # the records' sdpa model is left as loaded
                model.set_attn_implementation(attention)
            if config.gradient_checkpointing:
                enable_gradient_checkpointing(model)
            if config.lora:
                from peft import LoraConfig, get_peft_model

                model = get_peft_model(model, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                                                         lora_dropout=0.0, target_modules="all-linear",
                                                         task_type="CAUSAL_LM"))
        self.model = model
        self.autocast = config.bf16_autocast and bf16_supported()
        params = [p for p in model.parameters() if p.requires_grad]
        if any(p.dtype == torch.bfloat16 for p in params):
            self.optimizer: torch.optim.Optimizer = BF16AdamW(params, lr=config.learning_rate,
                                                              weight_decay=config.weight_decay, seed=config.seed)
        else:
            self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.scheduler = warmup_schedule(self.optimizer, config.warmup_steps)

    # -- data order ---------------------------------------------------------------------
    def _problem(self, index: int) -> Task:
        """The index-th problem of the endless epoch-wise shuffled stream."""
        epoch, offset = divmod(index, len(self.tasks))
        order = list(range(len(self.tasks)))
        random.Random(self.config.seed * 7919 + epoch).shuffle(order)
        return self.tasks[order[offset]]

    def next_batch_tasks(self, limit: int | None = None) -> list[Task]:
        n = self.config.batch_problems if limit is None else min(limit, self.config.batch_problems)
        return [self._problem(self.state.problems_seen + i) for i in range(n)]

    # -- the loop -----------------------------------------------------------------------
    def train(self, harness: HarnessRuntime, epochs: float,
              on_batch: Callable[[BatchRecord], None] | None = None,
              checkpoint_dir: Path | None = None) -> list[BatchRecord]:
        """Walk `epochs` (fractional) of the training set from where the last call stopped:
        one weight stage, batch by batch as the driver's weight phase (whalekit.run.phases.rsft)
        steps it. Stops early, cleanly, when the budget cannot pay for the next batch."""
        start = self.state.problems_seen
        records = []
        while (n := self.stage_batch_problems(epochs, self.state.problems_seen - start)) > 0:
            record = self.step(harness, n)
            records.append(record)
            if checkpoint_dir is not None:
                self.save_checkpoint(checkpoint_dir)
            if on_batch:
                on_batch(record)
        return records

    def stage_batch_problems(self, epochs: float | None, done: int) -> int:
        """Problems the next batch of a weight stage takes (`RSFTConfig.stage_batch_problems` on
        this trainer's training set and budget): what `train` loops over and the driver's weight
        step takes."""
        return self.config.stage_batch_problems(len(self.tasks), self.budget.remaining, epochs, done)

    def step(self, harness: HarnessRuntime, n_problems: int | None = None) -> BatchRecord:
        cfg = self.config
        tasks = self.next_batch_tasks(n_problems)
        episodes = [Episode(t, harness, g) for t in tasks for g in range(cfg.samples_per_problem)]
        self.budget.charge(len(episodes), RSFT_PHASE)
        version = self.sampler.version
        t0 = time.perf_counter()
        with phase("sample"):
            trajectories = rollout(self.domain, episodes, self.sampler, RolloutConfig(
                sampling=cfg.sampling, seed=cfg.seed, step=self.state.batches,
                max_context_tokens=cfg.max_context_tokens, description=f"rsft batch {self.state.batches + 1}"),
                policy_version=version, settings=self.settings)
        sample_seconds = time.perf_counter() - t0
        self.last_trajectories = trajectories
        accepted = [t for t in trajectories if t.correct]
        with phase("train"):  # the sampler sync inside it is charged to "sync"
            loss, tokens, dropped, train_seconds = self.update(accepted)
        self.state.problems_seen += len(tasks)
        self.state.batches += 1
        self.state.sampled += len(trajectories)
        reward = len(accepted) / len(trajectories)
        self.state.rewards.append(reward)
        window = self.state.rewards[-cfg.reward_window:]
        return BatchRecord(self.state.step, version, harness.harness_id, self.state.problems_seen / len(self.tasks),
                           len(trajectories), len(accepted), reward, sum(window) / len(window), loss, tokens, dropped,
                           sample_seconds, train_seconds)

    def update(self, accepted: list[Trajectory]) -> tuple[float | None, int, int, float]:
        """Optimiser steps on the accepted trajectories, one per global mini-batch of
        `minibatch_trajectories x data_parallel` of them in sampling order (the authors'
        ceil(accepted / (64 x dp)) steps per sampled batch: each of dp ranks splits its share
        into mini-batches of 64; 0 = one step on the whole batch), then one sampler sync.
        Returns the token-weighted mean loss, trained tokens, dropped turns and seconds."""

        size = self.config.minibatch_trajectories * self.config.data_parallel or max(1, len(accepted))
        dropped, loss_tokens, total_tokens = 0, 0.0, 0
        t0 = time.perf_counter()
        for start in range(0, len(accepted), size):
            sequences = []
            for traj in accepted[start:start + size]:
                seqs, d = packed_training_sequences(traj, self.config.max_seq_len)
                sequences += seqs
                dropped += d
            if not sequences:
                continue
            loss, tokens = self.ranks.step(sequences) if self.ranks is not None else self._optimiser_step(sequences)
            self.state.step += 1
            loss_tokens += loss * tokens
            total_tokens += tokens
        if not total_tokens:
            return None, 0, dropped, 0.0
        self.sync_sampler()
        release_freed_memory()  # the activations' and the merged weights' heap goes back to the system
        return loss_tokens / total_tokens, total_tokens, dropped, time.perf_counter() - t0

    def _optimiser_step(self, sequences: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
        """One optimiser and warm-up step of the in-process model on a global mini-batch."""
        import torch

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss, tokens = token_normalised_loss(self.model, sequences, self.config.micro_batch_sequences,
                                             self.pad_id, self.autocast,
                                             micro_batch_tokens=self.config.micro_batch_tokens,
                                             padding_mask=self.config.padding_mask,
                                             loss_chunk_tokens=self.config.loss_chunk_tokens,
                                             shared_prefix_tokens=self.config.shared_prefix_tokens,
                                             checkpoint_min_tokens=self.config.checkpoint_min_tokens)
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                       self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return loss, tokens

    # -- weights ------------------------------------------------------------------------
    def merged_state_dict(self, lora_layers_only: bool = False) -> dict[str, Any]:
        """Full-model weights with any LoRA adapter merged in, without modifying the
        trainer's model: what the sampler must hold after a sync. `lora_layers_only`: just
        the weights the adapter changes (the rest stays the base model's)."""
        import torch

        if self.ranks is not None:  # full fine-tuning, gathered from the shards
            return self.ranks.full_state_dict()
        if not self.config.lora:
            return {k: v.detach() for k, v in self.model.state_dict().items()}
        from peft.tuners.lora import LoraLayer

        base = self.model.base_model.model
        merged: dict[str, Any] = {}
        with torch.no_grad():
            for name, module in base.named_modules():
                if isinstance(module, LoraLayer):
                    merged[f"{name}.weight"] = _merged_weight(module)
            if lora_layers_only:
                return merged
            for name, tensor in base.state_dict().items():
                if "lora_" in name:
                    continue
                clean = name.replace(".base_layer", "")
                merged.setdefault(clean, tensor)
        return merged

    def sync_sampler(self) -> None:
        """The sampler gets the current weights. With LoRA: the adapter itself where the
        sampler applies adapters at run time (vLLM started with `lora_rank`, base weights
        untouched); else, after the first sync, only the layers the adapter changes (on
        samplers that take a partial update); else the merged model. From sharded ranks: in
        buckets of whole layers where the sampler takes them (`rsft.sync_bucket_mb`)."""
        with phase("sync"):
            load_changed = getattr(self.sampler, "load_changed_weights", None)
            load_buckets = getattr(self.sampler, "load_weight_buckets", None)
            if self.ranks is not None and self.config.sync_bucket_mb > 0 and load_buckets is not None:
                load_buckets(self.ranks.state_dict_buckets(int(self.config.sync_bucket_mb * 2**20)))
            elif self._syncs_adapters():
                self._sync_adapter()
            elif self.config.lora and self.synced and load_changed is not None:
                load_changed(self.merged_state_dict(lora_layers_only=True))
            else:
                self.sampler.load_weights(self.merged_state_dict())
            self.synced = True

    def _syncs_adapters(self) -> bool:
        return (self.config.lora and getattr(self.sampler, "lora_rank", None) is not None
                and not getattr(self.sampler, "base_modified", True) and hasattr(self.sampler, "load_lora_adapter"))

    def _sync_adapter(self) -> None:
        """Save the PEFT adapter (a few MB) to shared memory and hand it to the sampler; the
        previous adapter's folder goes once the sampler holds the new one in memory."""
        sampler = cast(AdapterSampler, self.sampler)  # _syncs_adapters: it takes adapters
        if self.config.lora_r > sampler.lora_rank:
            raise ValueError(f"rsft.lora_r {self.config.lora_r} exceeds the sampler's lora_rank "
                             f"{sampler.lora_rank}: raise vllm_options.lora_rank")
        folder = Path(tempfile.mkdtemp(prefix="whalekit-adapter-", dir=shared_memory_dir()))
        cleanup = weakref.finalize(self, shutil.rmtree, folder, True)  # at the latest with the trainer
        self.model.save_pretrained(folder)
        sampler.load_lora_adapter(folder)
        if self._adapter_cleanup is not None:
            self._adapter_cleanup()  # the sampler holds the new adapter in memory: the previous folder goes now
        self._adapter_dir, self._adapter_cleanup = folder, cleanup

    def close(self) -> None:
        """Stop the sharded ranks, if any (the in-process trainer holds no process); idempotent."""
        if self.ranks is not None:
            self.ranks.close()

    # -- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> None:
        """Weights (PEFT adapter or HF model), optimiser, scheduler and data position,
        written to a temporary folder and renamed, so a kill never leaves half a checkpoint."""
        import torch

        directory = Path(directory)
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.ranks is not None:  # each rank writes its shards of the weights and of AdamW
            self.ranks.save(tmp / "sharded")
            torch.save({"sampler_version": self.sampler.version}, tmp / "optimizer.pt")
        else:
            self.model.save_pretrained(tmp / "weights")
            torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                        "sampler_version": self.sampler.version}, tmp / "optimizer.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"schema_version": 1, "config": asdict(self.config),
                                                            **asdict(self.state)}))
        old = directory.with_name(directory.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            os.rename(directory, old)
        os.rename(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, directory: Path) -> None:
        import torch
        from safetensors.torch import load_file

        directory = Path(directory)
        if not directory.exists() and directory.with_name(directory.name + ".old").exists():
            directory = directory.with_name(directory.name + ".old")  # killed between the two renames
        weights = directory / "weights"
        if self.ranks is not None:
            self.ranks.load(directory / "sharded")
        elif self.config.lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, load_file(weights / "adapter_model.safetensors"))
        else:
            state = load_file(weights / "model.safetensors")
            self.model.load_state_dict(state, strict=False)
        extra = torch.load(directory / "optimizer.pt", weights_only=False)
        if self.ranks is None:
            self.optimizer.load_state_dict(extra["optimizer"])
            self.scheduler.load_state_dict(extra["scheduler"])
        data = json.loads((directory / "trainer_state.json").read_text())
        self.state = TrainerState(data["problems_seen"], data["step"], data["batches"], list(data["rewards"]),
                                  int(data.get("sampled", 0)))
        self.sync_sampler()
        self.sampler.version = int(extra["sampler_version"])


def _merged_weight(module: Any) -> Any:
    """W + scale * B @ A of one LoRA layer. A plain linear layer's in one fused addmm (half
    the memory traffic of forming the delta first: this is most of a LoRA sync's merge
    time on CPU); other layer types (DoRA, fan-in-fan-out, embeddings) through peft."""
    import torch

    weight = module.base_layer.weight
    lora_a, lora_b = module.lora_A["default"], module.lora_B["default"]
    plain = (isinstance(module.base_layer, torch.nn.Linear) and isinstance(lora_a, torch.nn.Linear)
             and not getattr(module, "fan_in_fan_out", False) and not module.use_dora.get("default", False))
    if plain and lora_a.weight.dtype == lora_b.weight.dtype == weight.dtype:
        return torch.addmm(weight, lora_b.weight, lora_a.weight, alpha=module.scaling["default"])
    delta = module.get_delta_weight("default")  # on every LoRA layer type
    return weight + delta.to(weight.dtype)
