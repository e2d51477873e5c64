"""Command line: run one (domain, method, schedule, seed), the schedule grid, report runs,
and score or check one harness file.

    whalekit run --domain chess --method whale --schedule 0.2,6 --preset cpu --seed 0
    whalekit run --domain chess --preset cpu --set budget=512 --print-config
    whalekit grid --domain chess --preset cpu
    whalekit report runs/cpu/chess/*
    whalekit report --timing runs/cpu/chess/*     # where each run's time went
    whalekit eval --domain toy --harness my_harness.py --preset smoke --split search --samples 4
    whalekit validate my_harness.py --domain toy
    whalekit reproduce --preset smoke                # and figures, verdicts, proposers, cost: their own --help

Errors in what was typed (unknown `--set` keys, bad values, paths that are not runs) are one
line on stderr and exit status 2; `validate` exits 1 when the harness is rejected.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from whalekit.cli import harness as cli_harness
from whalekit.cli.config import CLIError, config_yaml, resolve
from whalekit.domains.base import known_domains
from whalekit.infra.errors import DataError
from whalekit.infra.runs import RunDir
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.infra.timing import report_timing
from whalekit.presets import load_preset
from whalekit.report.run_summaries import load_run
from whalekit.run.config import StaleRunError
from whalekit.run.driver import run_method
from whalekit.run.methods import METHOD_NAMES
from whalekit.search.proposers.ledger import run_cost_report


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


def run_paths(paths: list[str]) -> list[Path]:
    """Run directories named on the command line: a run (it has config.json) stands for
    itself, a folder stands for every run below it; anything else is an error."""
    found: list[Path] = []
    wrong = []
    for name in paths:
        path = Path(name)
        if is_run(path):
            found.append(path)
        elif path.is_dir() and (below := sorted(p.parent for p in path.rglob("config.json") if is_run(p.parent))):
            found += below
        else:
            wrong.append(name)
    if wrong:
        raise CLIError(f"not a run directory (no config.json in or below it): {', '.join(wrong)}")
    return found


def is_run(path: Path) -> bool:
    """A run directory: its config.json is a run's (checkpoints hold a model's config.json)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"domain", "method", "schedule"} <= set(config)


def _add_config_flags(parser: argparse.ArgumentParser, preset: str = "cpu") -> None:
    parser.add_argument("--preset", default=preset, help="smoke | cpu | cpu-v3 | paper, or a preset YAML file")
    parser.add_argument("--seed", type=int, default=0,
                        help="the run's seed: data splits, sampling, training (default 0)")
    parser.add_argument("--runs-root", default="runs", help="run directories go under RUNS_ROOT/<preset>/<domain>/ "
                        "(default: runs)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a preset field, e.g. rsft.learning_rate=1e-4 (value parsed as YAML)")
    parser.add_argument("--isolation", choices=("sandbox", "none"), default=None,
                        help="none runs untrusted code WITHOUT the sandbox: trusted code and debugging only")
    parser.add_argument("--backend", choices=("local", "ray"), default=None,
                        help="where rollouts run: this process (local) or Ray rollout-worker actors (ray)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="whalekit", description="Weight-Harness Alternating LEarning")
    parser.add_argument("--version", action="version", version=f"whalekit {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run (or resume) one method")
    run_p.add_argument("--domain", required=True, metavar="DOMAIN",
                       help=f"the task domain: {', '.join(known_domains())} (or one registered by an entry point)")
    run_p.add_argument("--method", default="whale", choices=METHOD_NAMES, metavar="METHOD",
                       help=f"what to optimise and in which order: {', '.join(METHOD_NAMES)} (default whale)")
    run_p.add_argument("--schedule", default=None, help="E,I for whale/fst/stagewise, e.g. 0.6,6")
    _add_config_flags(run_p)
    run_p.add_argument("--print-config", action="store_true", help="print the resolved configuration as YAML and exit")
    run_p.set_defaults(handler=_run)
    grid_p = sub.add_parser("grid", help="the schedule grid of the preset (fixed schedules + stagewise)")
    grid_p.add_argument("--domain", default=None, metavar="DOMAIN", help="default: the preset's grid domain")
    grid_p.add_argument("--preset", default="cpu", help="smoke | cpu | cpu-v3 | paper, or a preset YAML file")
    grid_p.add_argument("--seed", type=int, default=0, help="the runs' seed (default 0)")
    grid_p.add_argument("--runs-root", default="runs", help="run directories go here (default: runs)")
    grid_p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a preset field in every run of the grid (value parsed as YAML)")
    grid_p.set_defaults(handler=_grid)
    report_p = sub.add_parser("report", help="summarise runs (run directories, or folders holding them)")
    report_p.add_argument("runs", nargs="+")
    report_p.add_argument("--timing", action="store_true",
                          help="a table of where each run's time went (sample, train, sync, test_eval, propose, ...)")
    report_p.add_argument("--figure", metavar="PATH", default=None,
                          help="also draw each run's test curve (mean@k against rollouts) into PATH (.png or .pdf; "
                               "with several runs, PATH's stem gets each run's name)")
    report_p.set_defaults(handler=_report)
    cli_harness.add_commands(sub, _add_config_flags)
    for name, (module, what) in PROGRAMS.items():  # listed in the help; main() hands them their arguments
        sub.add_parser(name, help=f"{what} (`whalekit {name} --help`; also `python -m {module}`)")
    return parser


def _run(args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {"isolation": args.isolation} if args.isolation else {}
    if args.backend:
        extra["backend"] = {"kind": args.backend}
    config = resolve(args.preset, args.domain, args.method, args.schedule, args.seed, args.runs_root, args.set,
                     **extra)
    if args.print_config:
        print(config_yaml(config), end="")
        return 0
    print(summary_line(run_method(config)))
    return 0


def _grid(args: argparse.Namespace) -> int:
    try:
        grid = load_preset(args.preset).get("grid")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if not grid:
        raise CLIError(f"preset {args.preset!r} has no grid section")
    domain = args.domain or grid["domain"]
    for schedule in grid["schedules"]:
        for method in ("whale",) + (("stagewise",) if schedule == grid["schedules"][0] else ()):
            config = resolve(args.preset, domain, method, "{:g},{}".format(*schedule), args.seed, args.runs_root,
                             args.set)
            print(summary_line(run_method(config)), flush=True)
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.timing:
        print(report_timing(run_paths(args.runs)))
        return 0
    paths = run_paths(args.runs)
    for path in paths:
        run = RunDir(path)
        print(summary_line(run))
        if (run.root / "archive").is_dir():  # proposer spend: per session, per accepted harness
            print("  " + run_cost_report(run.root / "archive", run.config()["domain"]).replace("\n", "\n  "))
        if args.figure:
            _curve(run, Path(args.figure), several=len(paths) > 1)
    return 0


def _curve(run: RunDir, target: Path, several: bool) -> None:
    """One run's test curve as a figure file (report.plots.run_curve_figure)."""
    from whalekit.report.plots import run_curve_figure  # matplotlib only when a figure is asked for

    if several:
        target = target.with_name(f"{target.stem}-{run.root.name}{target.suffix}")
    target.parent.mkdir(parents=True, exist_ok=True)
    run_curve_figure(load_run(run.root)).savefig(target, dpi=150, bbox_inches="tight")
    print(f"  figure: {target}")


# Subcommands that are whole programs of their own (`python -m <module>` still works): the rest of
# the command line goes to the module's own parser, so `whalekit reproduce --help` is its help.
PROGRAMS = {
    "reproduce": ("whalekit.repro.reproduce", "the paper's reproduction for a preset (`make reproduce`)"),
    "figures": ("whalekit.report.figures", "every figure and table of a preset from its records (`make figures`)"),
    "verdicts": ("whalekit.report.verdicts", "the paper's claims, decided from the records at their seeds"),
    "proposers": ("whalekit.report.proposer_table", "the proposer table (docs/proposers.md) from its records"),
    "cost": ("whalekit.report.cost_model", "what a paper-scale run costs: rollouts, tokens, GPU-hours"),
}


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words and words[0] in PROGRAMS:
        program = importlib.import_module(PROGRAMS[words[0]][0])  # loaded only when asked for: reporting is heavy
        return int(program.main(words[1:]) or 0)
    args = build_parser().parse_args(argv)  # argparse's own usage errors also exit with status 2
    if argv is None:  # the `whalekit` command (not a call from Python): a killed run closes its
        exit_on_sigterm()  # sampler (vLLM's engine process) instead of leaving it behind
    try:
        return int(args.handler(args))
    except (CLIError, StaleRunError, DataError) as exc:  # what was typed or found: one line, not a traceback
        print(f"whalekit {args.command}: error: {exc}", file=sys.stderr)
        return 2


def package_version() -> str:
    try:
        return metadata.version("whalekit")
    except metadata.PackageNotFoundError:  # a source tree on the path, not installed
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
