"""Calibrate the chess preset: score harnesses with the preset's model, sampler, puzzles and
sampling (T 1, top_k 20) and print `<harness> mean@k = x`, the format rate (a readable move),
the behaviour flags, per-subset accuracy and failure modes, after the uniform-random-legal-move
floor on the same puzzles (mean@k and its exact expectation).

Heavy: run it under the CPU lock. `h0` is the preset's initial harness (cpu: h0_cpu),
`h0_faithful` the authors' h0; `+mechanism` applies a catalogue mechanism.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_chess.py --preset cpu --harness h0_faithful h0 h1

Measured figures and their commands: docs/fidelity.md ("cpu starting point").
"""

from __future__ import annotations

import argparse
from typing import Any

from whalekit.domains.base import Domain
from whalekit.domains.chess.baselines import random_legal_move_score
from whalekit.repro.calibration import add_arguments, run_from_arguments
from whalekit.types import Task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args()

    def floor(domain: Domain, tasks: list[Task], samples: int) -> dict[str, Any]:
        score = random_legal_move_score(tasks, k=samples, seed=args.seed)
        print(f"random_legal mean@{samples} = {score.mean_at_k:.3f} (exact expectation {score.expected:.3f})",
              flush=True)
        return {"random_legal_move": {"mean@k": score.mean_at_k, "expected": score.expected}}

    run_from_arguments("chess", args, before=floor)


if __name__ == "__main__":
    main()
