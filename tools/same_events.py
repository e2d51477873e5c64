"""Do two run directories hold the same run? Compares their `events.jsonl` line by line with
every wall-clock field left out, so a refactor that should not change behaviour can be shown
not to (issue #29: "a run's events are identical before and after").

What is left out is time and nothing else: `timing`, `wall_s` and any `*_seconds` field. Every
other field (rollouts, rewards, losses, accepted counts, harness ids, behaviour, prompt-cache
counts) must be equal, and so must the number and order of the events.

    python tools/same_events.py RUN_DIR_BEFORE RUN_DIR_AFTER [RUN_DIR_BEFORE RUN_DIR_AFTER ...]

Exit status 0 when every pair matches; 1 with the first differing event of each pair otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from whalekit.repro.code_equivalence import first_difference, timeless_events


def events(run_dir: Path) -> list[Any]:
    try:
        return timeless_events(run_dir)
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    failed = 0
    for before, after in zip(argv[::2], argv[1::2]):
        a, b = events(Path(before)), events(Path(after))
        difference = first_difference(a, b)
        print(f"{before} vs {after}: {len(a)} events, " + ("identical without time fields" if difference is None
                                                            else f"DIFFERENT: {difference}"))
        failed += difference is not None
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
