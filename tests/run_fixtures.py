"""Small run directories written with the real writers (RunDir, Archive) and known
numbers, so figure and table tests run in milliseconds and can check exact values.
(The slow notebook test builds real ones with the driver and the smoke preset.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from whalekit.infra.runs import RunDir
from whalekit.run.driver import resolve_config
from whalekit.search.archive import Archive
from whalekit.types import Message, ToolCall, ToolResult, Trajectory, Turn

H0 = "from whalekit.harness import Harness\n\n\nclass H(Harness):\n    max_new_tokens = 64\n"


def trajectory(task_id: str = "toy-1+2", correct: bool = True, harness: str = "h0", prefill: str = "") -> Trajectory:
    first = Turn([1, 2, 3], [11, 12], '{"tool": "calculator"}', "stop", prefill=prefill,
                 tool_calls=[ToolCall("calculator", {"expression": "1+2"})],
                 tool_results=[ToolResult("calculator", "3")])
    second = Turn([1, 2, 3, 11, 12, 4], [13, 14, 15], "Answer: 3", "eos")
    messages = [Message("system", "Solve it."), Message("user", "What is 1 + 2?"),
                Message("assistant", prefill + first.text), Message("user", "3", kind="tool_result"),
                Message("assistant", second.text)]
    return Trajectory(task_id, "toy", harness, 0, [first, second], messages, "3" if correct else "4",
                      float(correct), correct, {"answered": True, "turns": 2, "format_valid": correct},
                      subset="default")


def write_run(runs_root: Path, method: str, accuracies: list[float], schedule: str | None = None,
              domain: str = "toy", seed: int = 0, step: int = 32, problems: int | None = None,
              task: str = "toy-1+2") -> RunDir:
    """A finished run whose test evaluations have `accuracies` (fractions), one every
    `step` rollouts, with alternating weight/harness stages and a two-child archive.
    With `problems`, each evaluation's trajectories are `problems` tasks × k=2 samples whose
    solved fraction is exactly the accuracy (the first round(accuracy × 2 × problems)
    samples, task by task, are correct), as the per-problem intervals need. Without it, the
    kept trajectories are of the one problem `task`."""
    config = resolve_config("smoke", domain=domain, method=method, schedule=schedule, seed=seed,
                            runs_root=str(runs_root))
    run = RunDir(config.run_dir)
    run.write_config(config.to_json())
    run.log("run_start", rollouts=0, budget=step * (len(accuracies) - 1), method=method,
            schedule=list(config.schedule), domain=domain, seed=seed, n_train=8, n_search=8, n_test=4)
    archive = Archive.open(run.root / "archive", domain)
    seed_id = archive.ensure_seed(H0)
    child = archive.add(H0 + "    prefill = 'Answer:'\n", [seed_id], "prefill helps", "add prefill", "reflective", 1)
    archive.add(H0 + "    max_new_tokens = 8\n", [seed_id], "shorter", "cut tokens", "reflective", 1)
    archive.record_evaluation(seed_id, 0, [trajectory(task, correct=False)], [None])
    archive.record_evaluation(child, 0, [trajectory(task, harness=child)], [None])
    for index, accuracy in enumerate(accuracies):
        rollouts = index * step
        if index:
            kind = "weight" if index % 2 else "harness"
            run.log("stage_start", kind=kind, stage=index - 1, rollouts=rollouts - step, epochs=0.5, iterations=1,
                    adaptive=method == "adaptive")
            if kind == "weight":
                run.log("rsft_batch", rollouts=rollouts, sampled=step, accepted=step // 2, reward=0.5)
            else:
                run.log("search_iteration", rollouts=rollouts, accepted_id=child, best_score=1.0)
            run.log("stage_end", kind=kind, stage=index - 1, rollouts=rollouts, steps=1, stage_rollouts=step)
        run.log("test_eval", index=index, reason="x", rollouts=rollouts, weights_version=index, accepted_id=seed_id,
                k=2, n_tasks=4, stages_done=index, mean_at_k=accuracy, by_subset={"default": accuracy},
                behaviour={"answered": min(1.0, accuracy + 0.25), "turns": 1.0 + index})
        run.write_trajectories(f"eval-{index:03d}", _samples(accuracy, problems, task))
    best = max(range(len(accuracies)), key=lambda i: (accuracies[i], -i))
    run.log("run_end", rollouts=step * (len(accuracies) - 1), budget=step * (len(accuracies) - 1),
            best_mean_at_k=accuracies[best], best_at_rollouts=best * step, final_mean_at_k=accuracies[-1],
            accepted_id=child, by_phase={}, wall_s=1.0)
    run.commit({"finished": True})
    return run


def _samples(accuracy: float, problems: int | None, task: str = "toy-1+2") -> list[Trajectory]:
    if problems is None:
        return [trajectory(task, correct=accuracy > 0.5), trajectory(task, correct=False)]
    solved = round(accuracy * 2 * problems)
    return [dataclasses.replace(trajectory(f"toy-{task}", correct=2 * task + sample < solved), sample_index=sample)
            for task in range(problems) for sample in range(2)]
