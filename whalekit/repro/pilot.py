"""The v3 pilot (docs/reproduction-v3.md, "The pilot"): seed 0 of WHALE (0.6, 6), WHALE (0.2, 6),
weight-only, harness-only and stagewise H→W on math and search QA, made one run after another
as records under results/cpu-v3/, each followed by what the design reads of it off the test
split: the weight-only math run's final weights scored on the search split (the math mix's
calibration level) and the θ×h matrix of every WHALE and stagewise run (analysis split).
Chunks stop at a run boundary (`--max-hours`); the same command continues. `--checks` prints
the pre-registered checks from what is recorded so far (and writes them to
results/cpu-v3/pilot-checks.json).

    flock /tmp/whalekit-cpu.lock .venv/bin/python -m whalekit.repro.pilot --max-hours 2
    .venv/bin/python -m whalekit.repro.pilot --checks
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.runs import RunDir, atomic_write
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.records.results import export_run, record_path
from whalekit.report.compatibility import load_matrix
from whalekit.report.compatibility_plots import compatibility_figure
from whalekit.report.plot_style import save_figure
from whalekit.repro.compatibility import score_matrix
from whalekit.repro.reproduce_plan import plan
from whalekit.repro.run_set import Deadline, PlannedRun, Records
from whalekit.run.config import RunConfig, resolve_config
from whalekit.run.driver import run_method
from whalekit.search.archive import archive_folders

PRESET = "cpu-v3"
# In the order they are made: the weight-only math run first, since the math mix is checked on its
# final weights and a failed check changes the design before the other math runs are made; then
# the search QA runs, which no math check can void; the other math runs last.
PILOT: tuple[tuple[str, str, str | None], ...] = (
    ("math", "weight_only", None),
    ("searchqa", "whale", "0.6,6"),
    ("searchqa", "stagewise_reverse", None),
    ("searchqa", "weight_only", None),
    ("searchqa", "harness_only", None),
    ("searchqa", "whale", "0.2,6"),
    ("math", "whale", "0.6,6"),
    ("math", "stagewise_reverse", None),
    ("math", "harness_only", None),
    ("math", "whale", "0.2,6"),
)
MATRIX_METHODS = ("whale", "stagewise", "stagewise_reverse")  # runs whose θ×h matrix the design reads
MATRIX_PROBLEMS, MATRIX_SAMPLES = 64, 4  # the analysis split and mean@k of docs/reproduction-v3.md
WEIGHT_ONLY_CEILING = 0.75  # the math mix passes when weight-only's final weights score below it (search split)
H0_LEVELS = (0.05, 0.35)  # h0's initial mean@8 on the search split must lie in this range
ACCEPTANCE_POWER = 0.8  # a 10-point better candidate is accepted at least this often
RESULTS = Path("results")


def pilot_configs() -> list[RunConfig]:
    return [resolve_config(PRESET, domain=domain, method=method, schedule=schedule, seed=0)
            for domain, method, schedule in PILOT]


def compatibility_path(config: RunConfig, suffix: str = "") -> Path:
    return RESULTS / PRESET / "compatibility" / config.domain / f"{config.run_name}{suffix}.json"


def calibration_path(config: RunConfig) -> Path:
    return RESULTS / "calibration" / PRESET / f"{config.domain}-{config.run_name}.json"


def analyse(config: RunConfig, log: Any = print) -> None:
    """What the design reads of a finished pilot run (each kept once made)."""
    run = RunDir(config.run_dir)
    if not run.done:
        return
    if config.method == "weight_only" and config.domain == "math" and not calibration_path(config).exists():
        level = score_matrix(run.root, n=config.n_search, k=config.eval_k, split="search", final_only=True,
                             out=compatibility_path(config, "-search-final"))
        cell = next(iter(level.cells.values()))
        record = {"split": "search", "preset": PRESET, "domain": config.domain, "run": config.run_name,
                  "by_subset": cell["by_subset"],
                  "what": "weight-only's final weights with h0 on the search split (the math mix's check)",
                  "mean_at_k": cell["mean"], "k": config.eval_k, "problems": level.n_problems,
                  "passes": cell["mean"] < WEIGHT_ONLY_CEILING, "ceiling": WEIGHT_ONLY_CEILING,
                  "cpu_kind": cpu_kind(), "command": level.conditions["command"]}
        atomic_write(calibration_path(config), json.dumps(record, indent=1, sort_keys=True))
        log(f"math mix check: weight-only's final weights score {cell['mean']:.3f} on the search split "
            f"({'passes' if record['passes'] else 'FAILS'} below {WEIGHT_ONLY_CEILING})")
    if config.method in MATRIX_METHODS:
        out = compatibility_path(config)
        done = out.exists() and "reading" in json.loads(out.read_text(encoding="utf-8"))
        if not done:
            score_matrix(run.root, n=MATRIX_PROBLEMS, k=MATRIX_SAMPLES, out=out)
            log(f"θ×h matrix of {config.domain}/{config.run_name} in {out}")
        log(f"θ×h heatmaps of {config.domain}: {', '.join(str(p) for p in draw_matrices(config.domain))}")


def draw_matrices(domain: str, figures: Path = Path("figures") / PRESET) -> list[Path]:
    """The domain's θ×h heatmaps from every complete matrix recorded for it, pilot order."""
    order = {c.run_name: i for i, c in enumerate(pilot_configs()) if c.domain == domain}
    folder = RESULTS / PRESET / "compatibility" / domain
    paths = [p for p in folder.glob("*.json") if p.stem in order]
    matrices = [load_matrix(p) for p in sorted(paths, key=lambda p: order[p.stem])
                if "reading" in json.loads(p.read_text(encoding="utf-8"))]
    return save_figure(compatibility_figure(matrices), figures / f"fig_compatibility_{domain}") if matrices else []


def make(max_hours: float | None, log: Any = print) -> Records:
    """Make the pilot's runs that are not recorded (at this code), then their analyses."""
    whole = [j.planned for j in plan(PRESET, results=RESULTS.resolve()) if j.planned is not None]
    by_key = {p.key: p for p in whole}
    selected = [by_key.get(f"{c.domain}/{c.run_name}", PlannedRun("c", c)) for c in pilot_configs()]
    records = Records(whole, RESULTS, export_run, Deadline(max_hours), log=log, selected=selected)
    log(records.summary())
    for planned in selected:
        if not records.recorded(planned):
            if records.stopped or not records.may_start(planned):
                records.stopped = True
                break
            records.started(planned)
            run_method(planned.config)
            records.finished(planned)
        analyse(planned.config, log)
    records.write_status()
    return records


# -- the checks ------------------------------------------------------------------------------
def search_noise(folder: Path) -> list[float]:
    """Candidate − parent search scores of a record's harness stages at trained weights
    (weights version > 0), each pair scored at the same weights on the same problems."""
    differences = []
    for archive in archive_folders(folder / "archive"):
        index = archive / "index.json"
        candidates = {c["id"]: c for c in json.loads(index.read_text(encoding="utf-8"))["candidates"]}
        for c in candidates.values():
            parent = candidates.get(c["parents"][0]) if c["parents"] else None
            for version, score in c["scores"].items():
                if int(version) > 0 and parent is not None and version in parent["scores"]:
                    differences.append(score - parent["scores"][version])
    return differences


def training_signal(events: list[dict[str, Any]]) -> float | None:
    """Share of the first weight stage's RSFT batches that accepted at least one trajectory
    (the weight lever's room at θ0); None for a run without a weight stage."""
    inside, accepted = False, []
    for event in events:
        if event["event"] == "stage_start" and event.get("kind") == "weight":
            inside = True
        elif event["event"] == "stage_end" and inside:
            break
        elif event["event"] == "rsft_batch" and inside:
            accepted.append(int(event["accepted"]) > 0)
    return sum(accepted) / len(accepted) if accepted else None


def stage_candidates(folder: Path) -> list[dict[str, int]]:
    """Per harness stage (archive round) of a record: candidates proposed and evaluated."""
    out = []
    for archive in archive_folders(folder / "archive"):
        candidates = json.loads((archive / "index.json").read_text(encoding="utf-8"))["candidates"]
        proposed = [c for c in candidates if c["parents"]]
        out.append({"proposed": len(proposed), "evaluated": sum(c["status"] == "evaluated" for c in proposed)})
    return out


def checks(results: Path = RESULTS) -> dict[str, Any]:
    """The pre-registered checks from the pilot records present under `results`."""
    found: dict[str, Any] = {"runs": {}, "cpu_kind": cpu_kind()}
    noise: list[float] = []
    for config in pilot_configs():
        folder = record_path(config, results)
        if not (folder / "events.jsonl").exists():
            continue
        events = RunDir(folder).events()
        end = next(e for e in events if e["event"] == "run_end")
        evals = [e for e in events if e["event"] == "test_eval"]
        made_on = json.loads((folder / "config.json").read_text(encoding="utf-8"))["provenance"].get("cpu_kind")
        run: dict[str, Any] = {"wall_s": end["wall_s"], "initial": evals[0]["mean_at_k"],
                               "final": evals[-1]["mean_at_k"], "cpu_kind": made_on}
        if config.method == "whale":
            run["stage_candidates"] = stage_candidates(folder)
            noise += search_noise(folder)
        signal = training_signal(events)
        if signal is not None:
            run["first_weight_stage_batches_with_an_accepted_trajectory"] = signal
        matrix = compatibility_path(config)
        if matrix.exists():
            run["matrix"] = json.loads(matrix.read_text(encoding="utf-8")).get("reading")
        found["runs"][f"{config.domain}/{config.run_name}"] = run
    if len(noise) >= 2:
        sd = statistics.stdev(noise)
        power = 0.5 * (1 + math.erf(0.10 / (sd * math.sqrt(2)))) if sd > 0 else 1.0
        found["search_noise"] = {"pairs": len(noise), "sd_points": 100 * sd, "power_for_10_points": power,
                                 "passes": power >= ACCEPTANCE_POWER}
    levels = {}
    for path in sorted((results / "calibration" / PRESET).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "harnesses" in data and "h0" in data["harnesses"] and path.stem in ("math", "searchqa"):
            value = data["harnesses"]["h0"]["mean_at_k"]
            level = {"value": value, "passes": H0_LEVELS[0] <= value <= H0_LEVELS[1]}
            if not level["passes"]:
                level["note"] = "3.1 keeps h0_cpu; read by its purpose: the first weight stage's training signal"
            levels[f"{path.stem} h0 (search split)"] = level
        elif "passes" in data:
            levels[f"{data['domain']} {data['run']} (search split)"] = {"value": data["mean_at_k"],
                                                                         "passes": data["passes"]}
    found["calibration"] = levels
    return found


def print_checks(found: dict[str, Any]) -> None:
    print(f"pilot checks (docs/reproduction-v3.md), CPU kind {found['cpu_kind']}:")
    for name, level in found["calibration"].items():
        print(f"  calibration {name}: {100 * level['value']:.1f} %  {'pass' if level['passes'] else 'FAIL'}"
              + (f" ({level['note']})" if "note" in level else ""))
    if "search_noise" in found:
        n = found["search_noise"]
        print(f"  search split noise at trained weights: SD {n['sd_points']:.1f} points over {n['pairs']} "
              f"candidate-parent pairs, power {n['power_for_10_points']:.2f} for +10 points  "
              f"{'pass' if n['passes'] else 'FAIL'}")
    for key, run in found["runs"].items():
        stages = run.get("stage_candidates")
        extra = f"  candidates per harness stage {[s['evaluated'] for s in stages]}" if stages else ""
        signal = run.get("first_weight_stage_batches_with_an_accepted_trajectory")
        extra += f"  first weight stage: {100 * signal:.0f} % of batches accepted a trajectory" \
            if signal is not None else ""
        print(f"  {key}: {100 * run['initial']:.1f} -> {100 * run['final']:.1f} (one seed, test split), "
              f"{run['wall_s'] / 60:.0f} min on {run['cpu_kind']}{extra}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.repro.pilot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-hours", type=float, default=None, help="start no run after this many hours")
    parser.add_argument("--checks", action="store_true", help="print the checks from the records so far; run nothing")
    args = parser.parse_args(argv)
    if args.checks:
        found = checks()
        atomic_write(RESULTS / PRESET / "pilot-checks.json", json.dumps(found, indent=1, sort_keys=True,
                                                                       ensure_ascii=False))
        print_checks(found)
        return 0
    exit_on_sigterm()
    records = make(args.max_hours, log=lambda line: print(line, flush=True))
    print(records.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
