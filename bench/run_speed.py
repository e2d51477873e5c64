"""A whole cpu-preset run at a baseline commit and at the working tree, side by side.

Why: a speed-up of one step (bench/rsft_speed.py) says little about a run, whose time is also
sampling, candidate and test evaluation and start-up. This bench runs the same WHALE run, cut to
a fixed rollout budget (two cycles of the cpu schedule by default), first with the code of
`--baseline` (a git worktree of that commit, on this environment's packages), then with the
working tree and its speed settings (`--set`, default: the ones cpu-v3 uses), one after the
other in one invocation on one machine. It prints the wall time of each, the time per phase
(the `timing` field of every event, summed), the ratio, and whether the two runs' events are
identical once timings are stripped; where they are not (a different reduction order in
training, fewer evaluations) it prints the first difference and both runs' test scores.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/run_speed.py --domain searchqa
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/run_speed.py --domain math --budget 928
    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/run_speed.py --domain toy --preset smoke --budget 96 \\
        --set-baseline '' --set ''      # the same settings on both sides: a pure code comparison

The baseline is the commit before issue 69's first change (2c4c1c9). Quote a result with the
CPU kind it prints and the model (SmolLM2-135M-Instruct, a Q4_1 GGUF that transformers dequantises).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from whalekit.infra.cpu_info import cpu_kind  # noqa: E402
from whalekit.infra.runs import RunDir, without_timings  # noqa: E402
from whalekit.presets import load_preset  # noqa: E402

BASELINE = "2c4c1c9"


def speed_settings(preset: str = "cpu-v3") -> list[str]:
    """The working tree's speed settings as the v3 preset has them (docs/speed.md): prompt prefixes
    shared in training, the trainer's attention, checkpointing only above a size, no evaluation of
    an unchanged agent."""
    data = load_preset(preset)
    rsft = [f"rsft.{key}={data['rsft'][key]}" for key in ("shared_prefix_tokens", "attention",
                                                          "checkpoint_min_tokens")]
    return [*rsft, f"eval_between={data['eval_between']}"]


def worktree(commit: str) -> Path:
    """A detached checkout of `commit` beside the repository's temporary files (made once)."""
    sha = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"whalekit-run-speed-{sha[:12]}"
    if not (path / "whalekit").is_dir():
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def run(tree: Path, runs_root: Path, args: argparse.Namespace, sets: list[str]) -> tuple[float, Path]:
    """One run with the code of `tree`; its wall time and run directory."""
    command = [sys.executable, "-m", "whalekit.cli.main", "run", "--preset", args.preset, "--domain", args.domain,
               "--method", "whale", "--seed", str(args.seed), "--runs-root", str(runs_root),
               "--set", f"budget.rollouts={args.budget}"]
    for item in (s for s in sets if s):
        command += ["--set", item]
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, check=True)
    seconds = time.perf_counter() - started
    folders = [p.parent for p in runs_root.glob("*/*/*/events.jsonl")]
    if len(folders) != 1:
        raise RuntimeError(f"{runs_root}: expected one run directory, found {folders}")
    return seconds, folders[0]


def phases(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per phase: RSFT sampling, training (with the sampler sync and checkpoints),
    candidate evaluation (the search's rollouts and proposer), test evaluation, the rest."""
    out = {"rsft sampling": 0.0, "training": 0.0, "search": 0.0, "test eval": 0.0, "start-up + other": 0.0}
    for row in rows:
        for key, seconds in (row.get("timing") or {}).items():
            if row["event"].startswith("search"):
                out["search"] += seconds
            elif key == "sample":
                out["rsft sampling"] += seconds
            elif key in ("train", "sync", "checkpoint"):
                out["training"] += seconds
            elif key == "test_eval":
                out["test eval"] += seconds
            else:
                out["start-up + other"] += seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="searchqa")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--budget", type=int, default=928, help="rollouts: two cycles of the cpu schedule (1.0, 2) "
                        "are 2 x (320 RSFT + 144 search)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", default=BASELINE, help="the commit whose code runs first")
    parser.add_argument("--set", action="append", dest="sets", default=None,
                        help="a setting of the working tree's run (repeatable; default: cpu-v3's speed settings)")
    parser.add_argument("--set-baseline", action="append", dest="baseline_sets", default=[],
                        help="a setting of the baseline's run (repeatable)")
    parser.add_argument("--keep", type=Path, default=None, help="keep both run directories under this folder")
    args = parser.parse_args()
    sets = speed_settings() if args.sets is None else args.sets
    base_tree = worktree(args.baseline)
    scratch = Path(tempfile.mkdtemp(prefix="whalekit-run-speed-")) if args.keep is None else args.keep
    print(f"cpu={cpu_kind()} preset={args.preset} domain={args.domain} budget={args.budget} seed={args.seed}\n"
          f"baseline {args.baseline} {' '.join(args.baseline_sets)}\nworking tree {' '.join(sets)}", flush=True)
    base_s, base_dir = run(base_tree, scratch / "baseline", args, args.baseline_sets)
    new_s, new_dir = run(ROOT, scratch / "working-tree", args, sets)
    base_rows, new_rows = RunDir(base_dir).events(), RunDir(new_dir).events()
    base_phases, new_phases = phases(base_rows), phases(new_rows)
    print(f"\n{'phase':20s} {'baseline s':>11s} {'working s':>10s} {'ratio':>6s}")
    for name in base_phases:
        ratio = new_phases[name] / base_phases[name] if base_phases[name] else float("nan")
        print(f"{name:20s} {base_phases[name]:11.1f} {new_phases[name]:10.1f} {ratio:6.2f}")
    print(f"{'wall (process)':20s} {base_s:11.1f} {new_s:10.1f} {new_s / base_s:6.2f}")
    stripped = without_timings(base_rows), without_timings(new_rows)
    if stripped[0] == stripped[1]:
        print("events: identical (timings stripped)")
    else:
        first = next((i for i, (a, b) in enumerate(zip(*stripped)) if a != b), min(map(len, stripped)))
        print(f"events: differ from event {first} ({len(stripped[0])} vs {len(stripped[1])} events)")
        for label, rows in (("baseline", base_rows), ("working tree", new_rows)):
            evals = [(e["rollouts"], round(e["mean_at_k"], 4), e["k"]) for e in rows if e["event"] == "test_eval"]
            print(f"  {label} test evaluations (rollouts, mean@k, k): {evals}")
    if args.keep is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
