"""Device check for the GPU path: a batched rollout through the sampler (vLLM when
importable, else transformers, said so), one RSFT step (full fine-tuning, then LoRA), the
weight sync after each, and a rollout after the sync; prints sampling tokens/s, training
tokens/s and the sync time; where 2 GPUs exist, a full step on 2 sharded trainer ranks
(`--trainer-ranks`); a tiny Qwen3.5 in its released conditional layout through the same
sample / step / sync; the dense retriever built and searched on GPU FAISS
(`--dense-passages`). Then (`--ray-replicas 2`, the default) the Ray backend: two sampler
replicas as Ray actors sharing the GPU, their rollout and a weight broadcast. Untimed on a
GPU since the last three cases were added (no GPU lent since); before them it finished in
well under 9 minutes on one H200.

The device machine reaches no network, so the model is built there: SmolLM2-135M's config
and tokenizer (prepared here, carried, a few MB) with random weights, which cost the same
per token as the real ones. Pass --model DIR for real weights.

    python bench/gpu_check.py --prepare .gpucheck          # here, once
    bash bench/gpu_check.sh                                  # there (reads .gpucheck/)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for rollout_throughput's harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # paper_models' tiny Qwen3.5

SHAPE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")


def prepare(target: Path) -> None:
    """Copy SmolLM2-135M's config and tokenizer (no weights) to `target`."""
    from whalekit.samplers.models import resolve_model_dir

    source = resolve_model_dir("smollm2-135m")
    out = target / "smollm2-135m-shape"
    out.mkdir(parents=True, exist_ok=True)
    for name in SHAPE_FILES:
        if (source / name).exists():
            shutil.copy(source / name, out / name)
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


def materialise(shape_dir: Path, cache: Path) -> Path:
    """A model directory with random weights of `shape_dir`'s config, in bf16."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = cache / "models" / f"random-{shape_dir.name}"
    if (out / "model.safetensors").exists():
        return out
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(shape_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(shape_dir).save_pretrained(out)
    return out


def make_sampler(path: Path, tokenizer, args):
    from whalekit.samplers.vllm import vllm_available

    if vllm_available() and not args.hf:
        from whalekit.samplers.vllm import VLLMSampler

        start = time.perf_counter()
        sampler = VLLMSampler(path, tokenizer, gpu_memory_fraction=args.gpu_memory_fraction,
                              enforce_eager=args.eager, max_model_len=2048)
        print(f"sampler: vLLM, started in {time.perf_counter() - start:.1f} s "
              f"(gpu_memory_fraction={args.gpu_memory_fraction})")
        return sampler, None
    from whalekit.samplers import HFSampler
    from whalekit.samplers.models import load_model

    print("sampler: transformers (vllm is not importable here: carry its wheels, see the device README)"
          if not args.hf else "sampler: transformers (--hf)")
    model = load_model(path, "bfloat16").to("cuda")
    return HFSampler(model, tokenizer, max_batch_size=args.episodes), model


def timed_rollout(domain, runtime, tasks, sampler, label: str) -> list:
    import torch

    from whalekit.rollouts.engine import Episode, RolloutConfig, rollout

    torch.cuda.synchronize()
    start = time.perf_counter()
    trajectories = rollout(domain, [Episode(t, runtime, i) for i, t in enumerate(tasks)], sampler,
                           RolloutConfig(progress=False))
    seconds = time.perf_counter() - start
    tokens = sum(t.generated_tokens for t in trajectories)
    print(f"{label}: {len(tasks)} episodes, {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.0f} tok/s")
    return trajectories


def rsft_step(policy, domain, tasks, trajectories, lora: bool, ranks: int = 1) -> None:
    """One optimiser step on the given trajectories (all counted as accepted: random
    weights solve nothing) and the sync that follows it, timed apart. `ranks` > 1: the
    trainer's sharded ranks (`rsft.trainer_ranks`: FSDP2 on NCCL, rank r on cuda:r)."""
    import torch

    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.weights.rsft import RSFTTrainer
    from whalekit.weights.rsft_config import RSFTConfig

    start = time.perf_counter()
    trainer = RSFTTrainer(policy, domain, tasks, RSFTConfig(lora=lora, micro_batch_sequences=32, max_seq_len=1024,
                                                            trainer_ranks=ranks), RolloutBudget(10**6))
    if ranks > 1:
        print(f"trainer ranks: {ranks} started and sharded in {time.perf_counter() - start:.1f} s")
    sampler, sync_times = policy.sampler, []
    load = sampler.load_weights

    def timed_load(state_dict):
        start = time.perf_counter()
        load(state_dict)
        sync_times.append(time.perf_counter() - start)

    sampler.load_weights = timed_load
    try:
        torch.cuda.synchronize()
        loss, tokens, _, seconds = trainer.update(trajectories)
    finally:
        sampler.load_weights = load
    train_seconds = seconds - sum(sync_times)
    how = (f"{ranks} FSDP2 ranks, float32 master weights, {trainer.config.sharded_compute_dtype} compute"
           if ranks > 1 else f"device {trainer.device}, bf16 autocast {trainer.autocast}, weights "
           f"{trainer.train_dtype}, {type(trainer.optimizer).__name__}, backend {trainer.backend}")
    print(f"RSFT step ({'LoRA' if lora else 'full'}, {how}): "
          f"loss {loss:.3f}, {tokens} tokens in {train_seconds:.2f} s = {tokens / train_seconds:.0f} training tok/s; "
          f"weight sync {sync_times[0]:.2f} s")
    if trainer.ranks is not None:
        trainer.ranks.close()
    del trainer
    torch.cuda.empty_cache()


def paper_architecture(tokenizer, domain, runtime, tasks, args) -> None:
    """Qwen3.5's released layout in small (tests/paper_models.py: hybrid Gated DeltaNet / full
    attention, a vision tower): built here, sampled (vLLM where it takes it, else transformers),
    one full RSFT step and its sync, greedy outputs compared before and after, time and memory."""
    import torch
    from paper_models import tiny_model

    from whalekit.samplers.models import Policy, cache_dir

    path = cache_dir() / "models" / "tiny-qwen3_5"
    if not (path / "config.json").exists():
        tiny_model("qwen3_5", tokenizer).save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
    torch.cuda.reset_peak_memory_stats()
    try:
        sampler, model = make_sampler(path, tokenizer, args)
    except Exception as exc:  # vLLM may not take the conditional layout: say so, then use transformers
        print(f"qwen3_5 (tiny): vLLM failed ({type(exc).__name__}: {str(exc)[:300]}); transformers instead")
        sampler, model = make_sampler(path, tokenizer, argparse.Namespace(**{**vars(args), "hf": True}))
    policy = Policy(str(path), path, tokenizer, model, sampler)
    probe = [probe_request(tokenizer, t) for t in tasks[:8]]
    from whalekit.samplers import SamplingParams

    before = [c.token_ids for c in sampler.generate(probe, SamplingParams(0.0))]
    trajectories = timed_rollout(domain, runtime, tasks[:64], sampler, "qwen3_5 (tiny) rollout")
    rsft_step(policy, domain, tasks, trajectories, lora=False)
    after = [c.token_ids for c in sampler.generate(probe, SamplingParams(0.0))]
    print(f"qwen3_5 (tiny): greedy outputs changed by the sync: {sum(a != b for a, b in zip(after, before))}/"
          f"{len(probe)}; peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    sampler.close()
    torch.cuda.empty_cache()


def probe_request(tokenizer, task):
    """A 16-token greedy probe of `task`'s question: its outputs show whether a sync took."""
    from whalekit.samplers import GenerationRequest

    ids = tokenizer.apply_chat_template([{"role": "user", "content": task.inputs["question"]}],
                                        add_generation_prompt=True, tokenize=True, return_dict=False)
    return GenerationRequest(ids, 16)


def dense_retriever(tokenizer, passages: int) -> None:
    """The dense retriever on GPU FAISS: a synthetic corpus of `passages` rows in wiki-18's
    format, a tiny random e5-style encoder, the index built on the GPU, reopened from disk onto
    GPU FAISS, and 256 searches timed."""
    import json
    import random

    import torch
    from transformers import BertConfig, BertModel

    from whalekit.domains.searchqa.dense import DenseIndex, build_dense_index
    from whalekit.samplers.models import cache_dir

    root = cache_dir() / "gpu-check-dense"
    root.mkdir(parents=True, exist_ok=True)
    words = [w for w in tokenizer.get_vocab() if w.isalpha()][:5000]
    rng = random.Random(0)
    corpus = root / "corpus.jsonl"
    with open(corpus, "w") as handle:
        for i in range(passages):
            text = " ".join(rng.choice(words) for _ in range(60))
            handle.write(json.dumps({"id": str(i), "contents": f'"title {i}"\n{text}'}) + "\n")
    encoder = root / "tiny-encoder"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, max_position_embeddings=512)).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    folder = build_dense_index(corpus, encoder, root / "index", batch_size=256, max_length=128, device="cuda")
    built = time.perf_counter() - start
    try:
        index, where = DenseIndex.open(folder, device="cuda", gpu=True), "GPU FAISS"
    except Exception as exc:  # faiss-cpu only: say so
        index, where = DenseIndex.open(folder, device="cuda"), f"CPU FAISS ({type(exc).__name__}: {exc})"
    queries = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(256)]
    start = time.perf_counter()
    hits = [index.search(q, k=5) for q in queries]
    searched = time.perf_counter() - start
    print(f"dense retriever: {passages} passages encoded and indexed in {built:.1f} s; {len(queries)} searches on "
          f"{where} in {searched:.2f} s ({sum(map(len, hits))} hits); peak GPU memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


def ray_replicas(path: Path, domain, runtime, tasks, reference: list, replicas: int, args) -> None:
    """`backend: ray` with `replicas` vLLM (or transformers) replicas sharing this GPU as
    Ray actors: the same rollout as the local sampler's (same trajectories: per-episode
    seeds), its wall time against the local one, and a weight broadcast to every replica."""
    import dataclasses

    import torch

    from whalekit.rollouts.backends import BackendConfig, ray_available
    from whalekit.rollouts.engine import Episode, RolloutConfig
    from whalekit.samplers.vllm import vllm_available

    if not ray_available():
        print("ray case: skipped, ray is not importable here (carry its wheels in .whl/, see bench/gpu_check.sh)")
        return
    import ray

    from whalekit.rollouts.backends.ray_backend import RayBackend, connect

    if not vllm_available() or args.hf:
        print("ray case: skipped, it runs vLLM replicas (the transformers sampler's GPU path is the local check)")
        return
    kind = "vllm"
    options = {"gpu_memory_fraction": args.gpu_memory_fraction / replicas, "enforce_eager": args.eager,
               "max_model_len": 2048}
    connect(BackendConfig(kind="ray", init_options={"num_gpus": 1, "num_cpus": 2 * replicas, "log_to_driver": False}))
    start = time.perf_counter()
    backend = RayBackend(BackendConfig(kind="ray", num_workers=replicas, cpus_per_worker=2,
                                       gpus_per_worker=1 / replicas), model=str(path), sampler_kind=kind,
                         sampler_options=options)
    print(f"ray case: {replicas} {kind} replicas on one GPU, started in {time.perf_counter() - start:.1f} s")
    episodes = [Episode(t, runtime, i) for i, t in enumerate(tasks)]
    config = RolloutConfig(progress=False)
    backend.rollout(domain, episodes[:8], config)  # warm-up
    start = time.perf_counter()
    trajectories = backend.rollout(domain, episodes, config)
    seconds = time.perf_counter() - start
    tokens = sum(t.generated_tokens for t in trajectories)
    same = [dataclasses.replace(t, timings={}) for t in trajectories] == \
        [dataclasses.replace(t, timings={}) for t in reference]
    print(f"ray case: {len(tasks)} episodes, {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.0f} tok/s "
          f"(per-worker episodes {[s.episodes for s in backend.stats]}); same trajectories as the local sampler: "
          f"{same} (vLLM batches are not bitwise batch-invariant, so False there is expected)")
    from whalekit.samplers.models import load_model

    state = load_model(path, "bfloat16").state_dict()
    start = time.perf_counter()
    backend.load_weights({k: v + 0.0 for k, v in state.items()})
    print(f"ray case: weight broadcast through the object store {time.perf_counter() - start:.2f} s; "
          f"worker versions {backend.worker_versions()} (driver {backend.version})")
    backend.close()
    ray.shutdown()
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, help="write the model shape folder here and exit")
    parser.add_argument("--model", type=Path, default=Path(".gpucheck/smollm2-135m-shape"),
                        help="a HF model dir; one without weights gets random ones")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--gpu-memory-fraction", type=float, default=0.3)
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs in vLLM (faster start)")
    parser.add_argument("--hf", action="store_true", help="use the transformers sampler even if vLLM is there")
    parser.add_argument("--trainer-ranks", type=int, default=2,
                        help="sharded trainer ranks (rsft.trainer_ranks) for a full step, where that many GPUs exist")
    parser.add_argument("--no-paper-architecture", dest="paper_architecture", action="store_false",
                        help="skip the tiny Qwen3.5 (conditional layout) sample / step / sync case")
    parser.add_argument("--dense-passages", type=int, default=20000,
                        help="dense retriever case: synthetic passages to index on the GPU (0: skip)")
    parser.add_argument("--ray-replicas", type=int, default=2, help="Ray backend case: replicas on this GPU (0: skip)")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return

    import torch
    from rollout_throughput import LongAnswer

    from whalekit.domains.base import get_domain
    from whalekit.rollouts.engine import InProcessHarness
    from whalekit.samplers import SamplingParams
    from whalekit.samplers.models import Policy, cache_dir, load_tokenizer

    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device visible")
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if not args.model.is_dir():
        sys.exit(f"gpu_check: {args.model} is missing: run `python bench/gpu_check.py --prepare .gpucheck` "
                 "here and carry .gpucheck")
    path = args.model if list(args.model.glob("*.safetensors")) else materialise(args.model, cache_dir())
    tokenizer = load_tokenizer(path)
    sampler, model = make_sampler(path, tokenizer, args)
    policy = Policy(str(path), path, tokenizer, model, sampler)
    domain = get_domain("toy")
    tasks = domain.load_splits(n_train=args.episodes, n_search=0, n_test=0, seed=0).train
    harness = LongAnswer()
    harness.new_tokens = args.new_tokens
    runtime = InProcessHarness(harness)

    probe = [probe_request(tokenizer, t) for t in tasks[:8]]
    before = [c.token_ids for c in sampler.generate(probe, SamplingParams(0.0))]
    timed_rollout(domain, runtime, tasks[:8], sampler, "warm-up rollout")
    trajectories = timed_rollout(domain, runtime, tasks, sampler, "rollout before training")
    rsft_step(policy, domain, tasks, trajectories[:64], lora=False)
    after = [c.token_ids for c in sampler.generate(probe, SamplingParams(0.0))]
    print(f"greedy outputs changed by the sync: {sum(a != b for a, b in zip(after, before))}/{len(probe)} prompts")
    after_sync = timed_rollout(domain, runtime, tasks, sampler, "rollout after the sync")
    rsft_step(policy, domain, tasks, trajectories[:64], lora=True)
    if args.trainer_ranks > 1 and torch.cuda.device_count() >= args.trainer_ranks:
        rsft_step(policy, domain, tasks, trajectories[:64], lora=False, ranks=args.trainer_ranks)
    elif args.trainer_ranks > 1:
        print(f"trainer ranks: skipped, {args.trainer_ranks} need as many GPUs ({torch.cuda.device_count()} here; "
              "NCCL takes one rank per GPU)")
    print(f"peak GPU memory allocated in this process: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    sampler.close()
    if args.paper_architecture:
        paper_architecture(tokenizer, domain, runtime, tasks, args)
    if args.dense_passages:
        dense_retriever(tokenizer, args.dense_passages)
    if args.ray_replicas:
        # the replicas start from the weights on disk: compare with the rollout before training
        del after_sync
        ray_replicas(path, domain, runtime, tasks, trajectories, args.ray_replicas, args)


if __name__ == "__main__":
    main()
