"""The RSFT trainer's weights on N sharded ranks: N processes started by the driver, each holding
1/N of the float32 master weights and of AdamW's moments (FSDP2, `whalekit.weights.distributed.sharded_training`),
stepped together on every global mini-batch the trainer sends, gathered whole for the sampler's
weight sync, and checkpointed shard by shard (`whalekit.weights.distributed.sharded_checkpoint`).

Why processes the driver owns: the driver keeps the sampler, the harness phase and the budget;
only the optimiser step needs the ranks. So `RSFTTrainer` (with `rsft.trainer_ranks > 1`) sends
each mini-batch's token sequences to every rank and takes back the loss; the ranks never see a
task, a harness or the test split. The gathered weights come back through shared memory
(torch's tensor reduction over the pipe): whole (`full_state_dict`), or bucket by bucket of whole
decoder layers (`state_dict_buckets`), so the driver holds one bucket at a time, not the model.

How ranks run: spawned with `torch.multiprocessing` (no fork of a driver that may hold a vLLM
engine), rendezvous over TCP on 127.0.0.1, gloo on CPU and NCCL with rank r on `cuda:r`, or on
`cuda:<rsft.trainer_devices[r]>` to keep the sampler's GPU apart (docs/gpu.md). Each rank is killed by the kernel
when the driver dies (`lifetime.die_with_parent`), and `close()` (also run when the group is
garbage-collected) stops them, killing any that does not stop within its timeout: no rank
outlives its trainer.

    ranks = TrainerRanks(model_dir, RSFTConfig(lora=False, trainer_ranks=2), pad_id=0)
    loss, tokens = ranks.step(sequences)          # one optimiser step on the global mini-batch
    sampler.load_weights(ranks.full_state_dict())
    sampler.load_weight_buckets(ranks.state_dict_buckets(512 * 2**20))   # the same, a bucket at a time
    ranks.save(run_dir / "sharded", extra={"step": 1}); ranks.close()
"""

from __future__ import annotations

import logging
import os
import traceback
import weakref
from collections.abc import Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from whalekit.infra.lifetime import die_with_parent
from whalekit.infra.ports import free_port
from whalekit.samplers.models import load_model
from whalekit.weights.distributed.sharded_checkpoint import (
    bucket_plan,
    full_state_dict,
    gather_tensors,
    load_sharded_checkpoint,
    save_sharded_checkpoint,
)
from whalekit.weights.distributed.sharded_training import ShardingConfig, shard_policy, sharded_step
from whalekit.weights.rsft_config import RSFTConfig

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0  # loading and sharding the policy on every rank (a 4B model from disk on a GPU node)
STOP_TIMEOUT_S = 30.0


class RankFailedError(RuntimeError):
    """A trainer rank raised or died; the message carries its traceback or exit code."""


class RankCommands:
    """The trainer's commands to its ranks, whatever launched them: each goes to every rank (they
    are collectives) through the launcher's `_command`, and rank 0's answer comes back."""

    def _command(self, name: str, payload: Any = None) -> Any:
        raise NotImplementedError

    def step(self, sequences: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
        """One optimiser step (and one warm-up scheduler step) on the global mini-batch."""
        loss, tokens = self._command("step", sequences)
        return float(loss), int(tokens)

    def full_state_dict(self) -> dict[str, Any]:
        """The unsharded float32 weights on the CPU, named as the Hugging Face model names them."""
        state: dict[str, Any] = self._command("state_dict")
        return state

    def state_dict_buckets(self, bucket_bytes: int) -> Iterator[dict[str, Any]]:
        """The same weights as `full_state_dict`, in buckets of whole decoder layers of about
        `bucket_bytes` each (`sharded_checkpoint.bucket_plan`), gathered when the caller asks
        for the next: the caller holds one bucket at a time (and drops it before the next)."""
        for names in self._command("bucket_plan", int(bucket_bytes)):
            bucket: dict[str, Any] = self._command("bucket", names)
            yield bucket

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> None:
        """A sharded checkpoint of weights, AdamW and the warm-up schedule at `path` (atomic)."""
        self._command("save", (str(path), extra or {}))

    def load(self, path: Path) -> dict[str, Any]:
        """Load a sharded checkpoint (written on any number of ranks); returns its `extra`."""
        extra: dict[str, Any] = self._command("load", str(path))
        return extra


class TrainerRanks(RankCommands):
    """N sharded trainer ranks for one RSFT trainer (module docstring). Full fine-tuning only:
    LoRA adapters under FSDP2 are untested here, so `RSFTConfig` refuses the combination."""

    def __init__(self, model_dir: Path, config: RSFTConfig, pad_id: int, device_type: str = "cpu",
                 start_timeout_s: float = START_TIMEOUT_S):
        import torch.multiprocessing as mp

        if config.trainer_ranks < 2:
            raise ValueError(f"TrainerRanks needs rsft.trainer_ranks >= 2, got {config.trainer_ranks}")
        self.world = config.trainer_ranks
        context = mp.get_context("spawn")
        port = free_port()  # the ranks' rendezvous on 127.0.0.1
        self._pipes: list[Any] = []  # the driver's ends of the ranks' pipes (multiprocessing Connections)
        self._processes: list[Any] = []
        for rank in range(self.world):
            driver_end, rank_end = context.Pipe()
            process = context.Process(target=_rank_main, name=f"whalekit-trainer-rank-{rank}", daemon=True,
                                      args=(rank, self.world, port, str(model_dir), config, pad_id, device_type,
                                            os.getpid(), rank_end))
            process.start()
            rank_end.close()
            self._pipes.append(driver_end)
            self._processes.append(process)
        self._finalizer = weakref.finalize(self, _stop, list(self._pipes), list(self._processes))
        self._gather("ready", timeout=start_timeout_s)

    def close(self) -> None:
        """Stop every rank (killed after STOP_TIMEOUT_S). Safe to call twice."""
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def _command(self, name: str, payload: Any = None) -> Any:
        if not self._finalizer.alive:
            raise RuntimeError("the trainer ranks are closed")
        for pipe in self._pipes:
            pipe.send((name, payload))
        return self._gather(name)

    def _gather(self, name: str, timeout: float | None = None) -> Any:
        """Every rank's reply to `name`, rank 0's result returned; a rank's error or death
        stops the whole group and raises RankFailedError."""
        answers: dict[int, Any] = {}
        pending = dict(enumerate(self._pipes))
        while pending:
            waitables: list[Any] = [*pending.values(), *(self._processes[r].sentinel for r in pending)]
            ready = wait(waitables, timeout)
            if not ready:
                self.close()
                raise RankFailedError(f"trainer ranks gave no answer to {name!r} within {timeout:g} s")
            for rank, pipe in list(pending.items()):
                if pipe in ready or self._processes[rank].sentinel in ready:
                    try:
                        status, value = pipe.recv()
                    except EOFError:
                        self.close()
                        raise RankFailedError(f"trainer rank {rank} died during {name!r} (exit code "
                                              f"{self._processes[rank].exitcode})") from None
                    if status == "error":
                        self.close()
                        raise RankFailedError(f"trainer rank {rank} failed during {name!r}:\n{value}")
                    answers[rank] = value
                    del pending[rank]
        return answers[0]


def rank_device(rank: int, config: RSFTConfig) -> int:
    """The CUDA device index trainer rank `rank` takes: `rsft.trainer_devices[rank]`, else `rank`."""
    return config.trainer_devices[rank] if config.trainer_devices is not None else rank


def _stop(pipes: list[Any], processes: list[Any]) -> None:
    for pipe in pipes:
        try:
            pipe.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
    for process in processes:
        process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            log.warning("trainer rank %s did not stop within %g s: killed", process.name, STOP_TIMEOUT_S)
            process.kill()
            process.join()
    for pipe in pipes:
        pipe.close()


# -- inside a rank ------------------------------------------------------------------------------
def _rank_main(rank: int, world: int, port: int, model_dir: str, config: RSFTConfig, pad_id: int,
               device_type: str, parent_pid: int, pipe: Any) -> None:
    """A rank's life: join the group, shard the policy, answer commands until "close"."""
    die_with_parent(parent_pid)
    try:
        rank_state = RankState(rank, world, f"tcp://127.0.0.1:{port}", Path(model_dir), config, pad_id, device_type,
                               rank_device(rank, config))
        pipe.send(("ok", None))
    except Exception:
        pipe.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            name, payload = pipe.recv()
            if name == "close":
                break
            try:
                pipe.send(("ok", rank_state.run(name, payload)))
            except Exception:
                pipe.send(("error", traceback.format_exc()))
                break
    except EOFError:  # the driver closed its end
        pass
    finally:
        rank_state.close()


class RankState:
    """One rank's sharded policy, optimiser and warm-up schedule (the trainer's own rules), whatever
    launched the rank (a spawned process here, a Ray actor in `whalekit.weights.distributed.ray_trainer_ranks`):
    it joins the group at `init_method` and takes `cuda:<device_index>` on CUDA."""

    def __init__(self, rank: int, world: int, init_method: str, model_dir: Path, config: RSFTConfig, pad_id: int,
                 device_type: str, device_index: int = 0, threads: int | None = None):
        import torch
        import torch.distributed as dist

        from whalekit.weights.optim import warmup_schedule

        self.config, self.pad_id, self.rank = config, pad_id, rank
        if device_type == "cuda":
            torch.cuda.set_device(device_index)
        else:  # the ranks share the machine's cores rather than each taking all of them
            torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // world))
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=init_method,
                                rank=rank, world_size=world)
        torch.manual_seed(config.seed)
        model = load_model(model_dir, "float32").to(torch.device(device_type, device_index)
                                                     if device_type == "cuda" else torch.device("cpu"))
        model.train()
        self.model = shard_policy(model, ShardingConfig(config.sharded_compute_dtype, config.gradient_checkpointing))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate,
                                           weight_decay=config.weight_decay)
        self.scheduler = warmup_schedule(self.optimizer, config.warmup_steps)

    def run(self, name: str, payload: Any) -> Any:
        if name == "step":
            cfg = self.config
            result = sharded_step(self.model, self.optimizer, payload, cfg.micro_batch_sequences, self.pad_id,
                                  max_grad_norm=cfg.max_grad_norm, micro_batch_tokens=cfg.micro_batch_tokens,
                                  padding_mask=cfg.padding_mask, loss_chunk_tokens=cfg.loss_chunk_tokens)
            self.scheduler.step()
            return result
        if name == "state_dict":
            state = full_state_dict(self.model)
            return state if self.rank == 0 else None
        if name == "bucket_plan":
            return bucket_plan(self.model, payload)
        if name == "bucket":
            bucket = gather_tensors(self.model, payload)
            return bucket if self.rank == 0 else None
        if name == "save":
            path, extra = payload
            save_sharded_checkpoint(self.model, self.optimizer, Path(path),
                                    extra={**extra, "scheduler_last_epoch": self.scheduler.last_epoch})
            return None
        if name == "load":  # the optimiser's state holds the learning rate; the schedule its position
            extra = load_sharded_checkpoint(self.model, self.optimizer, Path(payload))
            self.scheduler.last_epoch = int(extra.get("scheduler_last_epoch", self.scheduler.last_epoch))
            return extra
        raise ValueError(f"unknown trainer rank command {name!r}")

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


__all__ = ["RankCommands", "RankFailedError", "RankState", "TrainerRanks", "rank_device"]
