"""Checkpoints of a sharded policy (`.sharded_training`) with `torch.distributed.checkpoint`:
every rank writes its own shards of the weights and of the optimiser's state in parallel, and a
checkpoint loads onto any world size (DCP reshards on load), so a run saved on 8 GPUs resumes on
4, or on 1. Also the full, unsharded state dict the sampler's weight sync needs, whole or in
buckets of whole decoder layers (so the process that receives it never holds more than a bucket).

A checkpoint is complete only once its marker is written: the shards go to `<path>.partial`,
rank 0 writes `COMPLETE.json` there after every rank has finished, then renames the folder to
`<path>`. A run killed mid-write leaves only `<path>.partial`, which no load accepts and the next
save to the same path clears. On several nodes `path` must be on a filesystem they share.

    save_sharded_checkpoint(model, optimizer, run_dir / "step-000120", extra={"step": 120})
    extra = load_sharded_checkpoint(model, optimizer, run_dir / "step-000120")
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from whalekit.samplers.weight_buckets import layer_buckets

MARKER = "COMPLETE.json"
SCHEMA_VERSION = 1


class IncompleteCheckpointError(RuntimeError):
    """A checkpoint folder without its completion marker: its writer died before finishing."""


def partial_path(path: Path) -> Path:
    """Where a checkpoint is written before it is complete."""
    return path.with_name(path.name + ".partial")


def is_complete(path: Path) -> bool:
    """Whether `path` holds a checkpoint whose every shard was written."""
    return (Path(path) / MARKER).is_file()


def save_sharded_checkpoint(model: Any, optimizer: Any, path: Path, extra: dict[str, Any] | None = None,
                            group: Any = None) -> Path:
    """Write the sharded weights and optimiser state of every rank (a collective: all ranks call
    it) to `path`, atomically (module docstring). `extra` (JSON: step, seed, ...) is kept in the
    marker and returned by `load_sharded_checkpoint`. Refuses to overwrite a complete checkpoint."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path, rank = Path(path), dist.get_rank(group)
    staging = partial_path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists: a checkpoint is never overwritten")
    if rank == 0:  # what a killed writer left
        shutil.rmtree(staging, ignore_errors=True)
    dist.barrier(group)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=staging, process_group=group)
    dist.barrier(group)  # every rank's shards are on disk
    if rank == 0:
        marker = {"schema_version": SCHEMA_VERSION, "world_size": dist.get_world_size(group), "extra": extra or {}}
        with open(staging / MARKER, "w", encoding="utf-8") as handle:
            json.dump(marker, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(staging, path)
    dist.barrier(group)
    return path


def load_sharded_checkpoint(model: Any, optimizer: Any, path: Path, group: Any = None) -> dict[str, Any]:
    """Load a complete checkpoint into a `shard_policy` model and its optimiser, on this world
    size whatever the writer's (a collective). Returns the `extra` it was saved with."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    if not is_complete(path):
        raise IncompleteCheckpointError(f"{path} has no {MARKER}: not a complete checkpoint (its writer was "
                                        "stopped before the end, or it is not a sharded checkpoint)")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    # dcp.load fills these dicts in place (their tensors, resharded to this world size)
    dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path, process_group=group)
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
    marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    return dict(marker["extra"])


def full_state_dict(model: Any) -> dict[str, Any]:
    """The unsharded weights, gathered onto rank 0's CPU (a collective: every rank calls it; the
    others get {}), named as the unsharded Hugging Face model names them: what the sampler's
    weight sync loads. The gather goes one tensor at a time, each moved to the CPU before the
next, so a GPU never holds more than one gathered tensor."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return dict(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))


def bucket_plan(model: Any, bucket_bytes: int) -> list[list[str]]:
    """The names of the model's state dict in buckets of about `bucket_bytes` (counted unsharded,
    in the weights' own dtype), in state-dict order (`layer_buckets`). A tied head is the
    embeddings' own tensor: it is left out (sent once; at Qwen3.5-2B's 248,320-token vocabulary
    it is 2 GB in float32), as samplers skip it anyway. Every rank computes the same plan (it
    reads only names, global shapes and which parameters are shared)."""
    sizes: list[tuple[str, int]] = []
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():  # the parameters themselves: tied ones are one
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        sizes.append((name, tensor.numel() * tensor.element_size()))  # a DTensor's numel is its global one
    return layer_buckets(sizes, bucket_bytes)


def gather_tensors(model: Any, names: list[str], group: Any = None) -> dict[str, Any]:
    """The unsharded float tensors `names` of a sharded model, on rank 0's CPU (a collective:
    every rank calls it with the same names, in the same order; the others get {}). One tensor is
    gathered at a time and moved to the CPU before the next, as `full_state_dict` does."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    state = model.state_dict()
    rank = dist.get_rank(group)
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name in names:
            tensor = state[name]
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
            if rank == 0:
                out[name] = full.detach().to("cpu", copy=True)
            del full
    return out


__all__ = ["MARKER", "IncompleteCheckpointError", "bucket_plan", "full_state_dict", "gather_tensors", "is_complete",
           "load_sharded_checkpoint", "partial_path", "save_sharded_checkpoint"]
