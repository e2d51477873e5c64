"""`whalekit eval` and `whalekit validate`: score one harness file, or check it the way a
search stage checks a proposed candidate, without starting a run.

    whalekit eval --domain toy --harness h.py --preset smoke --split search --samples 4
    whalekit validate h.py --domain toy      # exit 0: accepted, 1: rejected (the reason is printed)

The file is untrusted code: both verbs run it in a sandboxed worker (`IsolatedHarness`), as
the search does; `eval` charges no budget and writes nothing but its HTML trace.
"""

from __future__ import annotations

import argparse
import html
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whalekit.cli.config import CLIError, one_line, resolve
from whalekit.domains.base import get_domain
from whalekit.report.widgets import trajectory_html
from whalekit.rollouts.engine import Episode, RolloutConfig, rollout
from whalekit.run.driver import mean_at_k
from whalekit.samplers.models import load_policy
from whalekit.sandbox.bwrap import isolation_mode, set_isolation_mode
from whalekit.sandbox.isolation import IsolatedHarness, validate_candidate, validate_source


def add_commands(sub: Any, add_config_flags: Callable[..., None]) -> None:
    eval_p = sub.add_parser("eval", help="score one harness file: mean@k, behaviour flags, an HTML trace")
    eval_p.add_argument("--domain", required=True)
    eval_p.add_argument("--harness", required=True, metavar="FILE", help="a harness module (.py)")
    eval_p.add_argument("--split", choices=("search", "test"), default="search",
                        help="search (default) or test; choosing harnesses on test scores is test-set selection")
    eval_p.add_argument("--samples", type=int, default=None, metavar="K", help="samples per problem (default eval_k)")
    eval_p.add_argument("--trace", default=None, metavar="FILE.html",
                        help="where the HTML trace goes (default RUNS_ROOT/eval/DOMAIN/NAME-SPLIT.html)")
    add_config_flags(eval_p, preset="cpu")
    eval_p.set_defaults(handler=evaluate_command)
    validate_p = sub.add_parser("validate", help="static check and dry run of one harness file, as a proposer sees")
    validate_p.add_argument("harness", metavar="FILE")
    validate_p.add_argument("--domain", required=True)
    add_config_flags(validate_p, preset="cpu")
    validate_p.set_defaults(handler=validate_command)


def read_harness(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise CLIError(f"{path}: no such harness file")
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read it ({one_line(str(exc))})") from None


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, domain, splits) from the preset, with the --set overrides and --isolation."""
    extra = {"isolation": args.isolation} if args.isolation else {}
    config = resolve(args.preset, args.domain, "whale", None, args.seed, args.runs_root, args.set, **extra)
    if config.isolation != isolation_mode():
        set_isolation_mode(config.isolation)
    try:
        domain = get_domain(config.domain, **config.domain_options)
        splits = domain.load_splits(n_train=config.n_train, n_search=config.n_search, n_test=config.n_test,
                                    seed=config.seed, **config.split_options)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(one_line(str(exc))) from None
    return config, domain, splits


def load_policy_for(config: Any) -> Any:
    """The policy the run would sample with (tests replace this with the tiny model)."""
    if config.sampler == "hf":
        return load_policy(config.model)
    return load_policy(config.model, sampler=config.sampler, vllm_options=config.vllm_options)


def proposer_feedback(source: str, task: Any, limits: Any) -> tuple[str | None, str | None]:
    """(static problem, dry-run problem), each None when that check passes: the words a
    proposer gets back from `write_candidate` and from the search stage's dry run."""
    static = validate_source(source)
    if static:
        return static, None
    return None, validate_candidate(source, task, limits)


def validate_command(args: argparse.Namespace) -> int:
    source = read_harness(args.harness)
    config, _domain, splits = _setup(args)
    probe = (splits.search or splits.train or splits.test)[0].view()
    static, dry_run = proposer_feedback(source, probe, config.search.limits())
    if static:
        print(f"{args.harness}: rejected by the static check: {static}")
        return 1
    print(f"{args.harness}: static check passed")
    if dry_run:
        print(f"{args.harness}: rejected: {dry_run}")
        return 1
    print(f"{args.harness}: dry run passed (one {config.domain} episode, canned model reply and tool results)")
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    source = read_harness(args.harness)
    problem = validate_source(source)
    if problem:
        print(f"{args.harness}: rejected by the static check: {problem}")
        return 1
    config, domain, splits = _setup(args)
    k = config.eval_k if args.samples is None else args.samples
    if k <= 0:
        raise CLIError(f"--samples must be positive, got {k}")
    tasks = splits.search if args.split == "search" else splits.test
    if not tasks:
        raise CLIError(f"the {args.split} split of {config.domain} under preset {config.preset!r} is empty")
    policy = load_policy_for(config)
    runtime = IsolatedHarness(source, config.search.limits(), Path(args.harness).stem)
    started = time.perf_counter()
    try:
        trajectories = rollout(domain, [Episode(task, runtime, i) for task in tasks for i in range(k)],
                               policy.sampler, RolloutConfig(sampling=config.eval_sampling, seed=config.seed,
                                                             max_new_tokens_cap=config.max_new_tokens_cap,
                                                             max_response_tokens=config.max_response_tokens,
                                                             max_context_tokens=config.search.max_context_tokens,
                                                             description=f"eval {args.split}"))
    finally:
        runtime.close()
    metrics = mean_at_k(trajectories, domain)
    wall = time.perf_counter() - started
    lines = summary_lines(args.harness, config, args.split, len(tasks), k, metrics, wall)
    trace = Path(args.trace) if args.trace else \
        Path(args.runs_root) / "eval" / config.domain / f"{Path(args.harness).stem}-{args.split}.html"
    write_trace(trace, lines, trajectories)
    print("\n".join(lines))
    print(f"trace: {trace}")
    return 0


def summary_lines(harness: str, config: Any, split: str, n_tasks: int, k: int, metrics: dict[str, Any],
                  wall: float) -> list[str]:
    lines = [f"{harness} on {config.domain} ({split} split, {n_tasks} problems x {k} samples, model {config.model}, "
             f"preset {config.preset}, seed {config.seed}, {wall:.1f} s)",
             f"mean@{k}: {100 * metrics['mean_at_k']:.1f}%"]
    if len(metrics["by_subset"]) > 1:
        lines.append("by subset: " + ", ".join(f"{name} {100 * v:.1f}%" for name, v in metrics["by_subset"].items()))
    lines.append("behaviour (mean per sample): " + ", ".join(f"{name} {v:.3g}"
                                                             for name, v in metrics["behaviour"].items()))
    return lines


def write_trace(path: Path, lines: list[str], trajectories: list[Any]) -> Path:
    """One self-contained HTML page: the summary, then every trajectory (wrong ones first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = sorted(trajectories, key=lambda t: (bool(t.correct), t.task_id, t.sample_index))
    body = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    body += "".join(f"<hr>{trajectory_html(t)}" for t in ordered)
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>whalekit eval</title></head>"
                    f"<body>{body}</body></html>", encoding="utf-8")
    return path
