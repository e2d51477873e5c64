"""Peak memory of one RSFT micro-batch's loss, forward + backward, with the cross-entropy in
chunks (`rsft.loss_chunk_tokens`) against all at once, in one process.

Why (issue 54): the loss projects a micro-batch's trained positions onto the vocabulary at
once, in float32 (with its log-softmax kept for backward and its gradient made in backward):
at the paper's shapes (8 x 8,192 tokens, Qwen3.5's 248,320-token vocabulary) that is 65 GB
per copy. In chunks each chunk's logits are recomputed in backward, so one chunk's exist at
a time. This measures what that saves at the cpu preset's micro-batch (8 sequences) on
SmolLM2-135M with the trainer's LoRA, gradient checkpointing and autocast, on the episode
shapes of bench/rsft_speed.py (measured from the cpu preset's h0_cpu test evaluations).

Peak: the kernel's resident high-water mark (VmHWM, reset through /proc/self/clear_refs)
above the resident size before the step, after `malloc_trim`; each setting measured
`--repeats` times alternately, the smallest peak kept. Losses of both are printed.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/chunked_loss.py
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/chunked_loss.py --shape three-turn --chunk 64

Measured (2026-12-07, 2-core AMD EPYC, AVX-512 with native bf16 (no AMX), alone under the CPU
lock, chunk 16, min of 3), peak above the step's start, full -> chunked: search QA's shape (120
trained tokens, 22.5 MiB of float32 logits) 676.7 -> 743.3 MiB, ratio 1.099; chess's (48 trained,
9.0 MiB) 622.4 -> 621.4 MiB, 0.998; three turns of 40 (960 trained, 180 MiB) 1,724.2 -> 1,129.1
MiB, 0.655. With `--chunk 64`, the next run: 1.038 / 0.956 / 0.638. Losses equal to 1e-6. The
full path's own peak moved by up to a third between the two runs (search QA 677 vs 895 MiB), so
at the cpu preset's episode shapes the difference is within that spread: where a micro-batch
trains few tokens the logits are a small part of the peak. With 960 trained tokens it is a third
lower in both runs. The cpu records keep the default (None); the gain grows with trained tokens
x vocabulary: up to 65 GB at the paper's shapes (8 x 8,192 tokens, 248,320 ids) against 9-180 MiB
here. (An earlier measurement, 2026-12-05, beside other jobs: 0.862 / 1.071 / 0.750.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rsft_speed import SHAPES, episodes  # noqa: E402

from whalekit.infra.cpu_info import cpu_kind  # noqa: E402
from whalekit.infra.memory import release_freed_memory  # noqa: E402
from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir  # noqa: E402
from whalekit.samplers.models import load_model  # noqa: E402
from whalekit.weights.rsft import bf16_supported, enable_gradient_checkpointing  # noqa: E402
from whalekit.weights.rsft_loss import packed_training_sequences, token_normalised_loss, trained_token_count  # noqa: E402


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_mib(step: Any) -> tuple[float, float]:
    """(peak resident MiB above the start, the step's result) of one call of `step`."""
    release_freed_memory()
    start = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    result = step()
    return (status_kib("VmHWM") - start) / 1024, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--shape", default="searchqa,chess,three-turn", help=f"comma-separated: {sorted(SHAPES)}")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward (the cpu preset's "
                        "rsft.micro_batch_sequences)")
    parser.add_argument("--chunk", type=int, default=16, help="rsft.loss_chunk_tokens")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model

    path = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(path)
    model = load_model(path)
    enable_gradient_checkpointing(model)  # the trainer's default, before LoRA as it does
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    model.train()
    autocast = bf16_supported()
    vocab = model.get_output_embeddings().weight.shape[0]
    print(f"{args.model}, LoRA r16, gradient checkpointing, bf16 autocast {autocast}, torch threads "
          f"{torch.get_num_threads()}, CPU {cpu_kind()}; micro-batch {args.micro_batch} sequences, chunk "
          f"{args.chunk} tokens, peak = VmHWM above VmRSS before the step, min of {args.repeats}")
    for shape in args.shape.split(","):
        sequences = [s for e in episodes(SHAPES[shape], args.micro_batch, vocab) for s in
                     packed_training_sequences(e, 4096)[0]][:args.micro_batch]
        trained = trained_token_count(sequences)

        def step(chunk: int | None, sequences: list[tuple[list[int], list[int]]] = sequences) -> float:
            model.zero_grad(set_to_none=True)
            loss, _ = token_normalised_loss(model, sequences, args.micro_batch, tokenizer.pad_token_id, autocast,
                                            loss_chunk_tokens=chunk)
            return loss

        peaks: dict[str, list[float]] = {"full": [], "chunked": []}
        losses: dict[str, float] = {}
        step(None)  # warm-up: one-time allocations (kernels, thread pools) out of the measurement
        for _ in range(args.repeats):
            for name, chunk in (("full", None), ("chunked", args.chunk)):
                peak, losses[name] = peak_mib(lambda chunk=chunk: step(chunk))
                peaks[name].append(peak)
        full, chunked = min(peaks["full"]), min(peaks["chunked"])
        print(f"{shape:10s}: {len(sequences)} sequences, {max(len(i) for i, _ in sequences)} tokens padded, "
              f"{trained} trained; fp32 logits at once {trained * vocab * 4 / 2**20:.1f} MiB; peak full "
              f"{full:.1f} MiB, chunked {chunked:.1f} MiB, ratio chunked/full {chunked / full:.3f}; "
              f"loss {losses['full']:.6f} vs {losses['chunked']:.6f}")


if __name__ == "__main__":
    main()
