"""A toy arithmetic domain: "What is 17 + 5?". It exists for the quickstart, the smoke
preset and mechanical tests; it has a `calculator` tool so multi-turn paths get used.

    domain = get_domain("toy")
    splits = domain.load_splits(n_train=16, n_search=8, n_test=8, seed=0)
"""

from __future__ import annotations

import ast
import operator
import random
import re
from typing import Any

from whalekit.domains.base import Domain, Splits, Toolbox, Verdict, split_disjoint
from whalekit.types import Task, TaskView, ToolResult, Trajectory

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculate(expression: str) -> int:
    """Evaluate + - * over integers, nothing else (no eval of arbitrary code)."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"unsupported expression: {expression!r}")

    return walk(ast.parse(expression.strip(), mode="eval"))


class ToyDomain(Domain):
    name = "toy"
    tools_description = "calculator(expression: str) -> the integer value of + - * expressions."

    def __init__(self, max_operand: int = 20):
        self.max_operand = max_operand

    def load_splits(self, n_train: int = 32, n_search: int = 16, n_test: int = 16, seed: int = 0,
                    **_: Any) -> Splits:
        rng = random.Random(seed)
        pairs = [(a, b) for a in range(self.max_operand + 1) for b in range(self.max_operand + 1)]
        rng.shuffle(pairs)
        tasks = [Task(id=f"toy-{a}+{b}", domain=self.name, inputs={"question": f"What is {a} + {b}?"},
                      reference=str(a + b)) for a, b in pairs]
        train, search, test = split_disjoint(tasks, lambda t: t.id, (n_train, n_search, n_test), seed, "toy")
        return Splits(train, search, test)

    def toolbox(self) -> Toolbox:
        def calculator(task: TaskView, args: dict[str, Any]) -> ToolResult:
            return ToolResult("calculator", str(calculate(str(args.get("expression", "")))))

        return Toolbox({"calculator": calculator})

    def verify(self, task: Task, answer: str | None) -> Verdict:
        numbers = re.findall(r"-?\d+", answer or "")
        valid = bool(numbers)
        correct = valid and numbers[-1] == str(task.reference)
        return Verdict(correct, float(correct), {"format_valid": valid})

    def behaviour(self, trajectory: Trajectory, task: Task, verdict: Verdict) -> dict[str, Any]:
        flags = super().behaviour(trajectory, task, verdict)
        flags["format_valid"] = verdict.details["format_valid"]
        return flags
