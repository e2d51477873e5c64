"""The math domain's one tool, `python`: run model-written code in the sandbox and hand
back what it printed (or why it stopped) as a ToolResult the harness formats.

It lives apart from the sandbox so the sandbox stays domain-free and the limits the
math preset uses are stated in one place.

    toolbox = python_toolbox(SandboxLimits(wall_s=5))
    toolbox.run(ToolCall("python", {"code": "print(2**10)"}), task_view).output   # '1024'
"""

from __future__ import annotations

from typing import Any

from whalekit.domains.base import Toolbox
from whalekit.sandbox.python_tool import SandboxLimits, run_python
from whalekit.types import TaskView, ToolResult

TOOLS_DESCRIPTION = """\
python(code: str) -> ToolResult. Runs `code` with a fresh Python 3.11 interpreter (numpy, sympy, math,
fractions, itertools available) in a sandbox: no network, no files outside a scratch directory, no
subprocesses, wall-clock/CPU/memory limits. `output` is stdout, then stderr (a traceback on an
exception), then a line saying why it stopped if it was stopped; it is capped in size. `ok` is False
on any failure and `error` names it: "exception", "syntax_error", "timeout", "memory",
"output_limit", "killed", "crash", "sandbox_error", or "bad_arguments" when `code` is missing.
Nothing is printed unless the code prints (`print(...)`); a bare last expression shows nothing.
Call it as ToolCalls([ToolCall("python", {"code": source})])."""

# Limits for model-written math code: generous enough for sympy, small enough that a
# runaway loop costs a few seconds of a 2-core machine.
DEFAULT_LIMITS = SandboxLimits(wall_s=10.0, cpu_s=8, memory_mb=1024, output_bytes=8000)


def python_toolbox(limits: SandboxLimits = DEFAULT_LIMITS) -> Toolbox:
    def python(task: TaskView, arguments: dict[str, Any]) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResult("python", "The python tool needs a non-empty 'code' string.", ok=False,
                              error="bad_arguments")
        return run_python(code, limits).to_tool_result("python")

    return Toolbox({"python": python})
