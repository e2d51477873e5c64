"""Weights from the driver to the Ray rollout workers over a torch.distributed group (gloo over
TCP), a bucket at a time, instead of through Ray's object store.

Why: through the object store every sync put a whole second copy of the weights into shared
memory (about 4 GB at Qwen3.5-2B in bf16), beside the driver's own, and each worker pulled the
whole of it before loading any. verl and OpenRLHF broadcast over a collective instead. Here the
driver packs one bucket of whole decoder layers (`samplers.weight_buckets.layer_buckets`) into one
flat byte buffer, broadcasts it, and only then packs the next; a worker hands each bucket to its
sampler's `load_weight_buckets` (vLLM's in-place reload, or the transformers model's copy) before
it receives the next. So the driver holds one packed bucket beyond the trainer, and a worker one
beyond its sampler.

A group is made per sync (rank 0 the driver, ranks 1..N the workers that take part), meeting on
a TCPStore the driver owns, under a key prefix of its own: a replaced worker never meets a stale
group. A sync whose source fails mid-stream (a trainer rank dying while its buckets are gathered)
tells the workers so, and they raise rather than wait for the timeout; their samplers then hold a
mix of old and new weights, and each worker marks itself stale (version -1), so the backend refuses
to sample with it until the next sync.

`WeightSpill` keeps the last sync's packed buckets on the driver's disk (a `whalekit-weights-<pid>-*`
folder, removed on close and swept if the driver dies), so that a worker replaced mid-rollout gets
the current weights by the same broadcast, replayed from disk, without asking the trainer again.

    source = BroadcastSource(host)                        # the driver, once
    meeting = source.meeting(world=3)                     # per sync
    refs = [w.receive_weights.remote(meeting, rank, version) for rank, w in ...]
    source.send(meeting, pack_buckets(buckets))           # returns once every rank has the last

Gloo carries CPU tensors, so GPU weights are copied to the driver's memory a bucket at a time;
an NCCL group straight between GPUs is not built (it needs the driver and each worker on distinct
GPUs, which this machine cannot test).
"""

from __future__ import annotations

import datetime
import os
import pickle
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.infra.lifetime import owned_temp_folder
from whalekit.samplers.weight_buckets import layer_buckets

ALIGN = 64  # bytes: every tensor starts at a multiple of this in its bucket, so any dtype can view it
END, ABORT = 0, -1  # header lengths that are not a bucket: the sync is over / the source failed


class WeightSyncAborted(RuntimeError):
    """The driver's weights stopped mid-sync (its source raised): this worker holds a mix."""


@dataclass(frozen=True)
class Meeting:
    """Where one sync's ranks meet: the driver's TCPStore and this sync's key prefix."""

    host: str
    port: int
    prefix: str
    world: int
    timeout_s: float


@dataclass(frozen=True)
class PackedBucket:
    """One bucket as it travels: a pickled index of (name, dtype, shape, offset, bytes) and the
    tensors' bytes, laid end to end at ALIGN-byte offsets in one uint8 tensor."""

    index: bytes
    payload: Any  # torch.Tensor, uint8, 1-D, on the CPU


def _dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dtype


def pack(bucket: Mapping[str, Any]) -> PackedBucket:
    """Copy a bucket's tensors (any dtype, any device) into one CPU byte buffer."""
    import torch

    entries, offset = [], 0
    for name, tensor in bucket.items():
        size = tensor.numel() * tensor.element_size()
        entries.append((name, str(tensor.dtype), tuple(tensor.shape), offset, size))
        offset += -(-size // ALIGN) * ALIGN
    payload = torch.empty(offset, dtype=torch.uint8)
    for (_, _, _, start, size), tensor in zip(entries, bucket.values()):
        if size:
            flat = tensor.detach().reshape(-1).contiguous().view(torch.uint8)
            payload[start:start + size].copy_(flat)
    return PackedBucket(pickle.dumps(entries), payload)


def unpack(packed: PackedBucket) -> dict[str, Any]:
    """The bucket's tensors, as views of the packed buffer (no copy)."""
    out = {}
    for name, dtype, shape, start, size in pickle.loads(packed.index):
        out[name] = packed.payload[start:start + size].view(_dtype(dtype)).reshape(shape)
    return out


def pack_buckets(buckets: Iterable[Mapping[str, Any]]) -> Iterator[PackedBucket]:
    """Each bucket packed when the next is asked for (the caller holds one at a time)."""
    for bucket in buckets:
        yield pack(bucket)


def state_dict_buckets(state_dict: Mapping[str, Any], bucket_bytes: int) -> Iterator[dict[str, Any]]:
    """A whole state dict in buckets of whole decoder layers of about `bucket_bytes`. A tensor
    that is another's storage under a second name (a tied head) is sent once, under its first
    name, as `sharded_checkpoint.bucket_plan` does for a sharded model: samplers skip it anyway."""
    seen: set[tuple[int, int, tuple[int, ...], str]] = set()
    sizes: list[tuple[str, int]] = []
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), str(tensor.dtype))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        sizes.append((name, tensor.numel() * tensor.element_size()))
    for names in layer_buckets(sizes, bucket_bytes):
        yield {name: state_dict[name] for name in names}


def _group(meeting: Meeting, rank: int, store: Any = None) -> Any:
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=meeting.timeout_s)
    if store is None:
        store = dist.TCPStore(meeting.host, meeting.port, is_master=False, timeout=timeout)
    return dist.ProcessGroupGloo(dist.PrefixStore(meeting.prefix, store), rank, meeting.world, timeout)


def _broadcast(group: Any, tensor: Any) -> None:
    group.broadcast(tensor, 0).wait()


def _send_length(group: Any, length: int) -> None:
    import torch

    _broadcast(group, torch.tensor([length], dtype=torch.int64))


class BroadcastSource:
    """The driver's end: the TCPStore every sync's ranks meet on (kept for the backend's life)."""

    def __init__(self, host: str = "127.0.0.1", timeout_s: float = 600.0):
        import torch.distributed as dist

        self.host, self.timeout_s = host, float(timeout_s)
        self._store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=self.timeout_s))
        self.port = self._store.port

    def meeting(self, world: int) -> Meeting:
        return Meeting(self.host, self.port, f"whalekit-weights-{uuid.uuid4().hex}/", int(world), self.timeout_s)

    def send(self, meeting: Meeting, packed: Iterable[PackedBucket]) -> int:
        """Broadcast every bucket to ranks 1..world-1, then the end mark; returns the bytes sent.
        If `packed` raises, the workers are told (ABORT) and the error is re-raised here."""
        import torch

        group = _group(meeting, 0, self._store)
        sent = 0
        buckets = iter(packed)
        while True:
            try:
                bucket = next(buckets)
            except StopIteration:
                _send_length(group, END)
                return sent
            except BaseException:
                _send_length(group, ABORT)
                raise
            _send_length(group, len(bucket.index))
            _broadcast(group, torch.frombuffer(bytearray(bucket.index), dtype=torch.uint8))
            _send_length(group, bucket.payload.numel())
            _broadcast(group, bucket.payload)
            sent += bucket.payload.numel()


def receive_buckets(meeting: Meeting, rank: int) -> Iterator[dict[str, Any]]:
    """A worker's end: each bucket as it arrives (views of a buffer it owns), until the end mark.
    Raises WeightSyncAborted if the driver's source failed."""
    import torch

    group = _group(meeting, rank)
    while True:
        length = torch.empty(1, dtype=torch.int64)
        _broadcast(group, length)
        if int(length) == END:
            return
        if int(length) == ABORT:
            raise WeightSyncAborted("the driver's weights failed mid-sync; this worker now holds a mix of "
                                    "old and new weights and is marked stale until the next sync")
        index = torch.empty(int(length), dtype=torch.uint8)
        _broadcast(group, index)
        _broadcast(group, length)
        payload = torch.empty(int(length), dtype=torch.uint8)
        _broadcast(group, payload)
        yield unpack(PackedBucket(index.numpy().tobytes(), payload))


def _write_bucket(path: Path, bucket: PackedBucket) -> None:
    with open(path, "wb") as out:
        out.write(len(bucket.index).to_bytes(8, "little"))
        out.write(bucket.index)
        out.write(memoryview(bucket.payload.numpy()))


class WeightSpill:
    """The last completed sync's packed buckets, on the driver's disk, for replaced workers.
    A sync is written to `next/` as it is sent and becomes `current/` only once it is complete,
    so a replay always gives one whole version. Costs one copy of the weights on local disk."""

    def __init__(self, folder: Path | None = None):
        self.folder = Path(folder) if folder is not None else owned_temp_folder("weights")
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def holds_weights(self) -> bool:
        return (self.folder / "current").is_dir()

    def recording(self, packed: Iterable[PackedBucket]) -> Iterator[PackedBucket]:
        """Pass `packed` through, writing each bucket to `next/` on a thread while the caller
        broadcasts it (a disk write and a socket send both release the GIL), and waiting for
        that write before the next bucket is packed: the sync costs max(send, write) a bucket,
        not their sum, and still holds one bucket. `commit` makes it current."""
        staging = self.folder / "next"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        buckets = iter(packed)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="whalekit-spill") as writer:
            number, pending = 0, None
            while True:
                if pending is not None:
                    pending.result()
                bucket = next(buckets, None)
                if bucket is None:
                    return
                pending = writer.submit(_write_bucket, staging / f"bucket-{number:05d}.bin", bucket)
                number += 1
                yield bucket

    def commit(self) -> None:
        current, staging = self.folder / "current", self.folder / "next"
        shutil.rmtree(current, ignore_errors=True)
        os.replace(staging, current)

    def replay(self) -> Iterator[PackedBucket]:
        """The current version's buckets, read one at a time."""
        import torch

        for path in sorted((self.folder / "current").glob("bucket-*.bin")):
            data = path.read_bytes()
            length = int.from_bytes(data[:8], "little")
            payload = torch.frombuffer(bytearray(data[8 + length:]), dtype=torch.uint8)
            yield PackedBucket(data[8:8 + length], payload)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
