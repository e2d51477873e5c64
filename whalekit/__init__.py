"""whalekit: Weight–Harness Alternating LEarning, as a notebook-first toolkit.

    import whalekit as wk
    policy = wk.load_policy("smollm2-135m")

Heavy dependencies (torch, transformers, anthropic, ipywidgets) load lazily, on first use
of the names that need them, so `import whalekit` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from whalekit.harness import EpisodeState, FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import Message, Task, TaskView, ToolCall, ToolResult, Trajectory, Turn

_LAZY = {
    "load_policy": "whalekit.samplers.models",
    "Policy": "whalekit.samplers.models",
    "get_domain": "whalekit.domains.base",
    "register_domain": "whalekit.domains.base",
    "Domain": "whalekit.domains.base",
    "SimpleDomain": "whalekit.domains.simple",
    "Splits": "whalekit.domains.base",
    "Toolbox": "whalekit.domains.base",
    "Verdict": "whalekit.domains.base",
    "rollout": "whalekit.rollouts.engine",
    "Episode": "whalekit.rollouts.engine",
    "InProcessHarness": "whalekit.rollouts.engine",
    "RolloutConfig": "whalekit.rollouts.engine",
    "load_harness": "whalekit.episode",
    "RolloutBudget": "whalekit.rollouts.budget",
    "run_method": "whalekit.run.driver",
    "resolve_config": "whalekit.run.config",
    "RunConfig": "whalekit.run.config",
    "RunDir": "whalekit.infra.runs",
    "Mechanism": "whalekit.domains.mechanisms",
    "apply_mechanism": "whalekit.domains.mechanisms",
}

__all__ = [
    "EpisodeState", "FinalAnswer", "FormatError", "GenerationSettings", "Harness", "ToolCalls",
    "Message", "Task", "TaskView", "ToolCall", "ToolResult", "Trajectory", "Turn", *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'whalekit' has no attribute {name!r}")
