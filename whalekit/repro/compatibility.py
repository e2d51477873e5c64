"""The θ×h compatibility matrix of one finished run: every stage's weights θ_i (θ0 and the
checkpoint each weight stage left, kept with `keep_stage_weights`) with every stage's
accepted harness h_j (h0 and what each harness stage accepted), scored on an analysis split
drawn apart from train, search and test (`domains.base.analysis_split`), so the verdicts'
test split is never read. Why: WHALE's mechanism is conditional over-optimisation, a
harness fitted to the weights it was searched under and weights fitted to the harness they
were trained with; the matrix measures it directly (docs/reproduction-v3.md).

Every cell uses the same episodes' seeds (common random numbers), so two cells of a row or
a column differ by the agent, not by the draw; each cell keeps its per-problem means for
paired comparisons.

    flock /tmp/whalekit-cpu.lock .venv/bin/python -m whalekit.repro.compatibility \\
        runs/cpu-v3/math/whale-0.6,6-s0 --n 64 --k 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from statistics import mean

from whalekit.domains.base import analysis_split
from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.runs import RunDir, atomic_write
from whalekit.infra.shutdown import exit_on_sigterm
from whalekit.report.compatibility import Agent, Matrix
from whalekit.rollouts.budget import RolloutBudget
from whalekit.rollouts.engine import Episode, RolloutConfig, rollout
from whalekit.run.config import RunConfig
from whalekit.run.evaluation import mean_at_k
from whalekit.run.parts import RunHarnesses, RunParts
from whalekit.run.phases.rsft import STAGE_WEIGHTS
from whalekit.weights.rsft import RSFTTrainer

SEED_OFFSET = 5_555_555  # the cells' episode seeds: apart from training, search and test's


def stage_agents(run: RunDir) -> tuple[list[Agent], list[Agent]]:
    """The run's weights and harnesses in stage order, from its events and kept checkpoints."""
    events = run.events()
    start = next(e for e in events if e["event"] == "test_eval")
    weights = [Agent("θ0", None, "", "h0")]
    harnesses = [Agent("h0", None, start["accepted_id"], "θ0")]
    accepted = start["accepted_id"]
    for event in events:
        if event["event"] == "search_iteration":
            accepted = event["accepted_id"]
        if event["event"] != "stage_end":
            continue
        stage = int(event["stage"])
        if event["kind"] == "weight":
            folder = run.root / STAGE_WEIGHTS / f"stage-{stage:02d}"
            if not folder.exists():
                raise FileNotFoundError(f"{folder}: weight stage {stage}'s checkpoint was not kept; make the run "
                                        "with keep_stage_weights: true")
            weights.append(Agent(f"θ{len(weights)}", stage, str(folder), harnesses[-1].label))
        elif accepted != harnesses[-1].ident:  # a harness stage that accepted nothing adds no column
            harnesses.append(Agent(f"h{len(harnesses)}", stage, accepted, weights[-1].label))
    return weights, harnesses


SPLITS = ("analysis", "search", "train")  # never test: the verdicts' split


def score_matrix(run_dir: Path, n: int = 64, k: int = 4, out: Path | None = None, split: str = "analysis",
                 final_only: bool = False) -> Matrix:
    """Score every (θ_i, h_j) of the finished run in `run_dir` on `n` problems of `split` at
    mean@k (`final_only`: the run's last weights with its last harness, e.g. a calibration level
    on the search split); writes the matrix to `out` (JSON) after every row, so a killed scoring
    loses one row at most."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: the matrix is scored on {', '.join(SPLITS)}, never on test")
    run = RunDir(run_dir)
    recorded = {key: value for key, value in run.config().items() if key != "provenance"}
    config = RunConfig(**recorded)
    weights, harnesses = stage_agents(run)
    if final_only:
        weights, harnesses = weights[-1:], harnesses[-1:]
    parts = RunParts.assemble(config)
    parts.harnesses = RunHarnesses(parts.harnesses.h0_source, run.root / "archive", config.search.limits())
    tasks = analysis_split(parts.domain, parts.splits, n, config.seed, **config.split_options) \
        if split == "analysis" else getattr(parts.splits, split)[:n]
    matrix = Matrix(run.root.name, config.domain, config.method, config.seed, k, len(tasks), weights, harnesses,
                    conditions={"model": config.model, "sampler": config.sampler, "proposer": config.proposer,
                                "preset": config.preset, "cpu_kind": cpu_kind(),
                                "temperature": config.eval_sampling.temperature, "top_k": config.eval_sampling.top_k,
                                "split": split, "command": "python -m whalekit.repro.compatibility "
                                f"{run_dir} --n {n} --k {k} --split {split}" + (" --final-only" if final_only else "")})
    if out is not None and out.exists():  # resume: rows already scored are kept
        done = json.loads(out.read_text(encoding="utf-8"))
        if (done.get("k"), done.get("n_problems"), done.get("conditions", {}).get("split")) == (k, len(tasks), split):
            matrix.cells = dict(done.get("cells", {}))
    trainer = None
    try:
        for theta in weights:
            if all(f"{theta.label}|{h.label}" in matrix.cells for h in harnesses):
                continue
            if theta.stage is not None:
                if trainer is None:
                    trainer = RSFTTrainer(parts.policy, parts.domain, parts.splits.train, config.rsft,
                                          RolloutBudget(0), settings=parts.settings)
                trainer.load_checkpoint(Path(theta.ident))  # its weights go to the sampler
            for h in harnesses:
                started = time.perf_counter()
                episodes = [Episode(task, parts.harnesses.runtime(h.ident), i) for task in tasks for i in range(k)]
                trajectories = rollout(parts.domain, episodes, parts.policy.sampler,
                                       RolloutConfig(sampling=config.eval_sampling, seed=config.seed + SEED_OFFSET,
                                                     description=f"{theta.label} x {h.label}"),
                                       settings=parts.settings)
                per_problem: dict[str, list[float]] = {}
                for t in trajectories:
                    per_problem.setdefault(t.task_id, []).append(float(t.correct))
                metrics = mean_at_k(trajectories, parts.domain)  # the test evaluation's own summary
                matrix.cells[f"{theta.label}|{h.label}"] = {
                    "mean": metrics["mean_at_k"], "by_subset": metrics["by_subset"],
                    "per_problem": {task: mean(v) for task, v in per_problem.items()},
                    "wall_s": time.perf_counter() - started}
                print(f"{theta.label} x {h.label}: {metrics['mean_at_k']:.3f}", flush=True)
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(out, json.dumps(matrix.to_json() if _complete(matrix) else asdict(matrix), indent=1,
                                             sort_keys=True, ensure_ascii=False))
    finally:
        if trainer is not None:
            trainer.close()
        parts.harnesses.close()
        close = getattr(parts.policy.sampler, "close", None)
        if close is not None:
            close()
    return matrix


def _complete(matrix: Matrix) -> bool:
    return all(f"{w.label}|{h.label}" in matrix.cells for w in matrix.weights for h in matrix.harnesses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a finished run made with keep_stage_weights: true")
    parser.add_argument("--n", type=int, default=64, help="analysis problems (default 64)")
    parser.add_argument("--k", type=int, default=4, help="samples per problem (default 4)")
    parser.add_argument("--split", default="analysis", choices=SPLITS,
                        help="analysis (drawn apart from train, search and test; default), search or train")
    parser.add_argument("--final-only", action="store_true",
                        help="only the run's last weights with its last harness (a calibration level)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the matrix's JSON (default results/<preset>/compatibility/<domain>/<run>.json)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    run = RunDir(args.run_dir)
    if not run.done:
        print(f"whalekit: {args.run_dir} is not a finished run; finish it first (`whalekit run` resumes it)",
              file=sys.stderr)
        return 2
    config = run.config()
    name = run.root.name if args.split == "analysis" and not args.final_only else \
        f"{run.root.name}-{args.split}{'-final' if args.final_only else ''}"
    out = args.out or Path("results") / Path(str(config["preset"])).stem / "compatibility" / str(config["domain"]) \
        / f"{name}.json"
    try:
        score_matrix(args.run_dir, args.n, args.k, out, args.split, args.final_only)
    except FileNotFoundError as exc:
        print(f"whalekit: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
