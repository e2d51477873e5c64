"""The math domain: problems with verifiable answers, a sandboxed Python tool, checking
with math-verify and the behaviour flags of the paper's Figure 3 (d-e). Here the
model is the bottleneck (replies run into the token cap); the harness decides when code
runs, what errors look like and how the final answer is read.

The constructor defaults are the calibrated CPU preset for SmolLM2-135M (see
bench/calibrate_math.py): a mix of generated problems, mostly single-step small-number
arithmetic, on which the plain h0 scores clearly above 0 and far below the ceiling.
Measured (64 test problems x 8 samples, T=1, seed 0, vLLM CPU sampler): h0 mean@8 0.109
(truncated 0.277, boxed 0.004, tool calls 0.141, tool errors 0.094 per episode; 143 s),
h1 mean@8 0.604 (truncated 0.072, boxed 1.0, tool calls 1.0, tool errors 0.197; 85 s).

    domain = get_domain("math")
    splits = domain.load_splits(n_train=64, n_search=32, n_test=64, seed=0)
"""

from __future__ import annotations

from typing import Any

from whalekit.domains.base import Domain, Splits, Toolbox, Verdict, split_disjoint
from whalekit.domains.math import data, generator, tools, verifier
from whalekit.sandbox.python_tool import SandboxLimits
from whalekit.types import Task, Trajectory

# The calibrated preset: mostly single-step small-number arithmetic, a few harder
# families so there is headroom for training and harness search.
DEFAULT_MIX = {"arithmetic": 0.7, "multistep": 0.1, "word": 0.1, "modular": 0.05, "algebra": 0.05}


class MathDomain(Domain):
    name = "math"
    tools_description = tools.TOOLS_DESCRIPTION
    failure_modes = ("truncated", "no_answer", "tool_error", "unparsable_answer", "wrong_answer")

    def __init__(self, mix: dict[str, float] | None = None, tool_limits: SandboxLimits = tools.DEFAULT_LIMITS):
        self.mix = generator.check_mix(dict(mix or DEFAULT_MIX))
        self.tool_limits = tool_limits

    def load_splits(self, n_train: int = 64, n_search: int = 32, n_test: int = 64, seed: int = 0,
                    source: str = "generated", path: str | None = None,
                    test_paths: str | list[str] | None = None, test_source: str | None = None,
                    **options: Any) -> Splits:
        """Disjoint splits (by normalised question text) of generated problems, or of a
        real file: `source` in ("dapo", "aime", "gsm8k") with `path` to the file.
        `test_paths`: separate test files (e.g. AIME 2024 and 2025 while training on DAPO),
        up to n_test problems from each, read as `test_source` (default: the source the file
        name names); `source`/`path` then give training and search only, without any
        problem that is also in a test file."""
        if options:
            raise TypeError(f"unknown load_splits options for math: {sorted(options)}")
        files = [test_paths] if isinstance(test_paths, str) else list(test_paths or [])
        sizes = (n_train, n_search, 0 if files else n_test)
        if source == "generated":
            # Extra problems: duplicates by normalised text are dropped before cutting.
            problems = generator.generate_problems(int(sum(sizes) * 1.1) + 10, seed, self.mix)
            tasks = [data.make_task(p.question, p.answer, p.family, {"source": "generated", "level": p.level,
                                                                     "seed": seed}) for p in problems]
        else:
            if path is None:
                raise ValueError(f"source={source!r} needs path= to the data file")
            tasks = data.load_file(source, path)
        key = lambda t: data.question_key(t.inputs["question"])
        name = source if path is None else str(path)
        if not files:
            return Splits(*split_disjoint(tasks, key, sizes, seed, name))
        test: list[Task] = []
        for file in files:
            held_out = data.load_file(test_source or data.source_for(file), file)
            test += split_disjoint(held_out, key, (0, 0, min(n_test, len({key(t) for t in held_out}))), seed,
                                   str(file))[2]
        in_test = {key(t) for t in test}
        train, search, _ = split_disjoint([t for t in tasks if key(t) not in in_test], key, sizes, seed, name)
        return Splits(train, search, test)

    def toolbox(self) -> Toolbox:
        return tools.python_toolbox(self.tool_limits)

    def verify(self, task: Task, answer: str | None) -> Verdict:
        return verifier.check(str(task.reference), answer)

    def behaviour(self, trajectory: Trajectory, task: Task, verdict: Verdict) -> dict[str, Any]:
        flags = super().behaviour(trajectory, task, verdict)
        results = [r for turn in trajectory.turns for r in turn.tool_results]
        flags.update({
            "boxed": verifier.has_boxed(trajectory.final_answer),
            "answer_parsed": verdict.details.get("parsed") is not None,
            "tool_calls": len(results),
            "tool_errors": sum(1 for r in results if not r.ok),
            "used_tool": bool(results),
            "correct": bool(verdict.correct),
        })
        return flags

    def failure_mode(self, trajectory: Trajectory) -> str | None:
        if trajectory.correct:
            return None
        flags = trajectory.flags
        if trajectory.final_answer is None:
            if trajectory.turns and trajectory.turns[-1].finish_reason == "length":
                return "truncated"
            results = [r for r in (trajectory.turns[-1].tool_results if trajectory.turns else [])]
            return "tool_error" if results and not all(r.ok for r in results) else "no_answer"
        if flags.get("truncated") and not flags.get("boxed"):
            return "truncated"
        if not flags.get("answer_parsed", True):
            return "unparsable_answer"
        return "wrong_answer"


__all__ = ["MathDomain", "DEFAULT_MIX"]
