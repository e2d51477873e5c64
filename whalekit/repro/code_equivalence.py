"""Proving that edited run code still computes what the old code did, so the records the old
code made stay valid.

Why: `code_identity` re-makes a record when any module a run executes changes. A refactor, a
new option at a default that keeps the old path, or a new proposer beside the old ones
changes modules without changing a single number; re-making 102 cpu runs (about 40 h) for it
would be waste, and accepting it unchecked would be trust. So the claim is tested: the same
runs are made at the old commit and at this checkout, with the transformers sampler (seeded
per episode and turn: its draws are exact), and their events compared with every wall-clock
field left out (`timeless`). Identical events for every run enter the ledger as
`equivalent_to` the old version, with the evidence (runs, event counts and hashes); the
records of the old version then count for this code (`RunCode.changes_since`).

What it proves is bounded by what the runs exercise: by default a smoke run of every method
on math and of WHALE on chess and search QA (tiny random model, transformers sampler, every
phase, the reflective proposer). `--cpu-math-rollouts N` adds a cpu-preset math WHALE run cut
to N rollouts with SmolLM2 and the transformers sampler (`--cpu-math-test-problems M`: its test
evaluations on M problems instead of 64). Paths none of them take (vLLM, bf16
autocast on another CPU kind) are not covered; the evidence names what was run.

    python -m whalekit.repro.code_equivalence --against 8e740fb --results results   # under the CPU lock
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.records.code_identity import PACKAGE_DIR, RunCode, ledger_entries, ledger_path, register

TIME_FIELDS = frozenset({"timing", "wall_s"})
SMOKE_RUNS = (*(("math", m) for m in ("whale", "weight_only", "harness_only", "fst", "stagewise",
                                      "stagewise_reverse", "adaptive")), ("chess", "whale"), ("searchqa", "whale"))


def timeless(value: Any) -> Any:
    """`value` with every wall-clock field removed, at any depth (`timing`, `wall_s`, `*_seconds`)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in TIME_FIELDS and not k.endswith("_seconds")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def timeless_events(run_dir: Path) -> list[Any]:
    path = Path(run_dir) / "events.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no events file (is {run_dir} a run directory?)")
    return [timeless(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def first_difference(before: Sequence[Any], after: Sequence[Any]) -> str | None:
    """None when the two event lists are equal, else a description of the first difference."""
    for index, (a, b) in enumerate(zip(before, after)):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else []
            return f"event {index} ({a.get('event') if isinstance(a, dict) else '?'}) differs in {keys}"
    if len(before) != len(after):
        return f"{len(before)} events before, {len(after)} after"
    return None


@dataclass(frozen=True)
class Comparison:
    run: str  # "<preset> <domain> <method>"
    events: int
    sha256: str  # of the timeless events (equal on both sides when `difference` is None)
    difference: str | None


def export_commit(commit: str, into: Path, repo: Path = PACKAGE_DIR.parent) -> Path:
    """The `whalekit` package of `commit`, written under `into` (git's objects; no worktree)."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "whalekit"], cwd=repo, check=True,
                             capture_output=True, timeout=120).stdout
    into.mkdir(parents=True, exist_ok=True)
    tar = into / "code.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as handle:
        handle.extractall(into, filter="data")
    return into


def _run(code_root: Path, runs_root: Path, preset: str, domain: str, method: str, extra: Sequence[str]) -> Path:
    """One run with the package under `code_root` first on the path; its run directory."""
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    cli = "whalekit.cli.main" if (code_root / "whalekit" / "cli" / "main.py").exists() else "whalekit.cli"
    command = [sys.executable, "-m", cli, "run", "--domain", domain, "--method", method, "--preset",
               preset, "--seed", "0", "--runs-root", str(runs_root), "--set", "sampler=hf", *extra]
    done = subprocess.run(command, cwd=code_root, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[3:])} failed at {code_root}:\n{done.stderr[-2000:]}")
    found = sorted((runs_root / preset).glob(f"{domain}/{method}*-s0/events.jsonl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one {domain} {method} run under {runs_root}, found {len(found)}")
    return found[0].parent


def compare(old_root: Path, new_root: Path, work: Path, runs: Sequence[tuple[str, str, str, tuple[str, ...]]],
            log: Any = print) -> list[Comparison]:
    """Each of `runs` ((preset, domain, method, extra --set args)) made by both codes and compared."""
    out = []
    for preset, domain, method, extra in runs:
        label = f"{preset} {domain} {method}"
        before = timeless_events(_run(old_root, work / "old", preset, domain, method, extra))
        after = timeless_events(_run(new_root, work / "new", preset, domain, method, extra))
        digest = hashlib.sha256(json.dumps(after, sort_keys=True).encode()).hexdigest()
        comparison = Comparison(label, len(after), digest, first_difference(before, after))
        log(f"{label}: {len(after)} events, " + ("identical without time fields" if comparison.difference is None
                                                 else f"DIFFERENT: {comparison.difference}"))
        out.append(comparison)
    return out


def prove(against: str, results: Path, runs: Sequence[tuple[str, str, str, tuple[str, ...]]],
          log: Any = print) -> bool:
    """Compare this checkout with `against` on `runs`; when every run is identical, register
    this code in the ledger as equivalent to the old version. True when proven."""
    old_code, new_code = RunCode.at_commit(against), RunCode.of_package()
    if old_code.source_sha256 not in ledger_entries(results):
        register(results, old_code, against)
    with tempfile.TemporaryDirectory(prefix="whalekit-equivalence-") as tmp:
        work = Path(tmp)
        old_root = export_commit(against, work / "old-code")
        comparisons = compare(old_root, PACKAGE_DIR.parent, work, runs, log)
    if any(c.difference for c in comparisons):
        log("not equivalent: the ledger is unchanged")
        return False
    entries = ledger_entries(results)
    entries.pop(new_code.source_sha256, None)
    evidence = {"against_commit": against, "sampler": "hf",
                "runs": [{"run": c.run, "events": c.events, "events_sha256": c.sha256} for c in comparisons]}
    entries[new_code.source_sha256] = {"commit": None, "modules": dict(sorted(new_code.modules.items())),
                                       "equivalent_to": old_code.source_sha256, "evidence": evidence}
    path = ledger_path(results)
    path.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    log(f"{path}: this code ({new_code.source_sha256[:12]}) is equivalent to {old_code.source_sha256[:12]} "
        f"on {len(comparisons)} runs")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.repro.code_equivalence",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the commit whose records should stay valid")
    parser.add_argument("--results", default="results")
    parser.add_argument("--runs", nargs="+", default=None, metavar="DOMAIN:METHOD",
                        help="the smoke runs to compare (default: every method on math, WHALE on chess and search QA)")
    parser.add_argument("--cpu-math-rollouts", type=int, default=0,
                        help="also compare a cpu-preset math whale run cut to this many rollouts (SmolLM2, hf)")
    parser.add_argument("--cpu-math-test-problems", type=int, default=None,
                        help="test problems of that run (default: the preset's 64, 512 hf episodes per evaluation, "
                             "over 15 min a side on 2 cores): fewer keep the proof short and change no other setting")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # a terminated proof kills its run (subprocess.run does) and removes its temporary folder
    pairs = [tuple(r.split(":", 1)) for r in args.runs] if args.runs else list(SMOKE_RUNS)
    runs: list[tuple[str, str, str, tuple[str, ...]]] = [("smoke", domain, method, ()) for domain, method in pairs]
    if args.cpu_math_rollouts:
        test = ("--set", f"n_test={args.cpu_math_test_problems}") if args.cpu_math_test_problems else ()
        runs.append(("cpu", "math", "whale", ("--set", f"budget.rollouts={args.cpu_math_rollouts}", *test)))
    return 0 if prove(args.against, Path(args.results), runs) else 1


if __name__ == "__main__":
    sys.exit(main())
