"""Calibrate the search-QA preset: score harnesses with the preset's model, sampler, world,
question mix and sampling (T 1, top_k 20) and print `<harness> mean@k = x`, the format rate
(an <answer> tag), the behaviour flags (searches, retrieval_hit, ...), per-family accuracy and
failure modes.

Heavy: run it under the CPU lock. `h0` is the preset's initial harness (cpu: h0_cpu),
`h0_faithful` the authors' h0; `+mechanism` applies a catalogue mechanism.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/calibrate_searchqa.py --preset cpu --harness h0_faithful h0 h1

Measured figures and their commands: docs/fidelity.md ("cpu starting point").
"""

from __future__ import annotations

import argparse

from whalekit.repro.calibration import add_arguments, run_from_arguments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    run_from_arguments("searchqa", parser.parse_args())


if __name__ == "__main__":
    main()
