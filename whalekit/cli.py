"""Command line: run one (domain, method, schedule, seed), the schedule grid, or report.

    whalekit run --domain chess --method whale --schedule 0.2,6 --preset cpu --seed 0
    whalekit grid --domain chess --preset cpu
    whalekit report runs/cpu/chess/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml


def _overrides(pairs: list[str]) -> dict[str, Any]:
    """--set rsft.learning_rate=1e-4 --set budget=512 -> nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--set takes KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(value)
    return out


def summary_line(run: Any) -> str:
    config = run.config()
    end = run.events("run_end")
    if not end:
        return f"{run.root}: not finished"
    e = end[-1]
    k = config.get("eval_k", 8)
    return (f"{config['domain']} {config['method']} {tuple(config['schedule'])} seed {config['seed']}: "
            f"best test mean@{k} {100 * e['best_mean_at_k']:.1f}% at {e['best_at_rollouts']} rollouts, "
            f"final {100 * e['final_mean_at_k']:.1f}%, {e['rollouts']}/{e['budget']} rollouts, "
            f"{e.get('wall_s', 0):.0f} s  [{run.root}]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whalekit", description="Weight-Harness Alternating LEarning")
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run (or resume) one method")
    run_p.add_argument("--domain", required=True)
    run_p.add_argument("--method", default="whale")
    run_p.add_argument("--schedule", default=None, help="E,I for whale/fst/stagewise, e.g. 0.6,6")
    run_p.add_argument("--preset", default="cpu")
    run_p.add_argument("--seed", type=int, default=0)
    run_p.add_argument("--runs-root", default="runs")
    run_p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset field")
    run_p.add_argument("--isolation", choices=("sandbox", "none"), default=None,
                       help="none runs untrusted code WITHOUT the sandbox: trusted code and debugging only")
    grid_p = sub.add_parser("grid", help="the schedule grid of the preset (fixed schedules + stagewise)")
    grid_p.add_argument("--domain", default=None)
    grid_p.add_argument("--preset", default="cpu")
    grid_p.add_argument("--seed", type=int, default=0)
    grid_p.add_argument("--runs-root", default="runs")
    report_p = sub.add_parser("report", help="summarise finished runs")
    report_p.add_argument("runs", nargs="+")
    args = parser.parse_args(argv)

    from whalekit.runs import RunDir
    from whalekit.whale import resolve_config, run_method

    if args.command == "run":
        overrides = _overrides(args.set)
        if args.isolation:
            overrides["isolation"] = args.isolation
        config = resolve_config(args.preset, args.domain, args.method, args.schedule, args.seed,
                                runs_root=args.runs_root, **overrides)
        print(summary_line(run_method(config)))
    elif args.command == "grid":
        from whalekit.presets import load_preset

        grid = load_preset(args.preset)["grid"]
        domain = args.domain or grid["domain"]
        for schedule in grid["schedules"]:
            for method in ("whale",) + (("stagewise",) if schedule == grid["schedules"][0] else ()):
                config = resolve_config(args.preset, domain, method, tuple(schedule), args.seed,
                                        runs_root=args.runs_root)
                print(summary_line(run_method(config)), flush=True)
    else:
        for path in args.runs:
            if (Path(path) / "config.json").exists():
                print(summary_line(RunDir(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
