"""Weight sync for the vLLM sampler through shared memory: the trainer's tensors are copied
into one buffer in /dev/shm (RAM, not disk) that the engine's worker maps too, and the
worker reloads them in place with vLLM's layer-wise `reload_weights`, which repacks each
layer for the CPU kernels as a fresh load would. Nothing is serialised and no model file
is written; the buffer is made once and reused by every sync. Its file is unlinked as soon as
the engine's workers have mapped it (after the first sync): the memory lives while a mapping
does, so a SIGKILLed driver and its engine leave no 270-540 MB file in /dev/shm (only a kill
inside the first sync's few seconds can, and the next sampler's start sweeps that).

    buffer = SharedWeights.for_tensors(state_dict)       # driver side, once
    layout = buffer.write(state_dict)                     # each sync: one copy per tensor
    llm.collective_rpc("whalekit_load_shared_weights", args=(buffer.path, layout))
    buffer.unlink()                                       # every worker has mapped it: the file goes

`WorkerWeightSync` is vLLM's `worker_extension_cls`: its methods join the engine worker's
and are what `collective_rpc` calls by name.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

ALIGN = 64  # bytes: every tensor starts on a cache line
# (name, byte offset, shape, dtype name): what the worker needs to view the buffer
Layout = list[tuple[str, int, list[int], str]]


def shared_memory_dir() -> Path:
    """/dev/shm where it exists (tmpfs: RAM), else the temporary folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class SharedWeights:
    """A file-backed shared buffer holding a fixed set of tensors, laid out once."""

    def __init__(self, layout: Layout, size: int):
        import torch

        self.layout = layout
        self.size = size
        handle, name = tempfile.mkstemp(prefix=f"whalekit-weights-{os.getpid()}-", suffix=".bin",
                                        dir=shared_memory_dir())
        os.ftruncate(handle, size)
        os.close(handle)
        self.path = name
        self.buffer = torch.from_file(name, shared=True, size=size, dtype=torch.uint8)
        self.views = _views(self.buffer, layout)

    @classmethod
    def for_tensors(cls, state_dict: Mapping[str, Any], dtype: Any) -> SharedWeights:
        """A buffer with room for every tensor of `state_dict` in `dtype`."""
        import torch

        width = torch.empty((), dtype=dtype).element_size()
        layout: Layout = []
        offset = 0
        for name in sorted(state_dict):
            shape = list(state_dict[name].shape)
            numel = 1
            for size in shape:
                numel *= size
            layout.append((name, offset, shape, str(dtype).removeprefix("torch.")))
            offset += -(-numel * width // ALIGN) * ALIGN
        return cls(layout, max(offset, ALIGN))

    def fits(self, state_dict: Mapping[str, Any]) -> bool:
        return set(state_dict) <= set(self.views) and all(
            list(state_dict[n].shape) == list(self.views[n].shape) for n in state_dict)

    def write(self, state_dict: Mapping[str, Any], also: Collection[str] = ()) -> Layout:
        """Copy the tensors in (converting dtype on the way); the layout of those written
        and of the `also` ones, whose values in the buffer stand."""
        import torch

        with torch.no_grad():
            for name, tensor in state_dict.items():
                self.views[name].copy_(tensor.detach())
        return [entry for entry in self.layout if entry[0] in state_dict or entry[0] in also]

    def unlink(self) -> None:
        """Remove the file; this process's mapping (and every worker's) stays valid. After it,
        the buffer cannot be mapped again by path (a worker maps it at the first sync only)."""
        Path(self.path).unlink(missing_ok=True)

    def close(self) -> None:
        self.views = {}
        del self.buffer
        self.unlink()


def _views(buffer: Any, layout: Layout) -> dict[str, Any]:
    import torch

    out = {}
    for name, offset, shape, dtype_name in layout:
        dtype = getattr(torch, dtype_name)
        numel = 1
        for size in shape:
            numel *= size
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        out[name] = buffer[offset:offset + nbytes].view(dtype).view(shape)
    return out


class WorkerWeightSync:
    """Mixed into vLLM's worker (`worker_extension_cls`): load weights from a shared buffer."""

    def whalekit_load_shared_weights(self, path: str, layout: Layout) -> int:
        import torch

        cache: dict[str, Any] | None = getattr(self, "_whalekit_buffers", None)
        if cache is None:
            cache = {}
            self._whalekit_buffers = cache
        if path not in cache:
            cache.clear()  # one buffer at a time: a new one replaces the old mapping
            cache[path] = torch.from_file(path, shared=True, size=os.path.getsize(path), dtype=torch.uint8)
        views = _views(cache[path], layout)
        # A partial update leaves layers out on purpose: vLLM's warnings that it "failed to load"
        # them (and then kept their weights, as asked) would print on every sync.
        quiet = [logging.getLogger(f"vllm.model_executor.model_loader.reload.{m}") for m in ("inplace", "layerwise")]
        levels = [logger.level for logger in quiet]
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        try:
            self.reload_weights(weights_iterator=iter(views.items()))  # type: ignore[attr-defined]
        finally:
            for logger, level in zip(quiet, levels):
                logger.setLevel(level)
        if any(name.endswith("embed_tokens.weight") for name in views):
            _repack_tied_lm_head(self.model_runner.get_model())  # type: ignore[attr-defined]
        return len(views)


def _repack_tied_lm_head(model: Any) -> None:
    """A tied lm_head shares the embedding's weight, but on CPU its matmul runs from a copy
    prepacked when it was loaded (oneDNN / sgl handle); the reload loads no weight of its own
    into it, so that copy would keep the old embedding. Prepack it again from the new one."""
    model = getattr(model, "language_model", model)  # a conditional-generation model's text part (Qwen3.5)
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    method = getattr(head, "quant_method", None)
    if head is None or embed is None or method is None or not hasattr(head, "weight"):
        return
    if head.weight.data_ptr() == embed.weight.data_ptr():
        method.process_weights_after_loading(head)
