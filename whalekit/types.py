"""Plain records that flow through a rollout: tasks, messages, turns, trajectories.

Everything here is a dataclass that round-trips through JSON, so trajectories can be
written to JSONL, read back by a notebook, and shipped over a pipe to an isolated
harness worker.

    task = Task(id="t1", domain="math", inputs={"question": "2+2?"}, reference="4")
    view = task.view()          # what a harness sees: no reference answer
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class TaskView:
    """The part of a task a harness or proposer may read. It holds a deep copy of the
    inputs and no reference to the Task it came from, so the answer is unreachable."""

    id: str
    domain: str
    inputs: dict[str, Any]
    subset: str = "default"


@dataclass
class Task:
    id: str
    domain: str
    inputs: dict[str, Any]  # shown to the harness (question, FEN, ...)
    reference: Any  # the answer key: only the domain verifier reads it
    subset: str = "default"  # sub-dataset name, reported separately (e.g. "two_hop")
    meta: dict[str, Any] = field(default_factory=dict)  # provenance: file, row, rating...

    def view(self) -> TaskView:
        return TaskView(id=self.id, domain=self.domain, inputs=copy.deepcopy(self.inputs), subset=self.subset)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        return cls(**data)


@dataclass
class Message:
    role: Role
    content: str
    kind: str = "text"  # "text", "tool_result", "feedback", "few_shot": for the trace viewer


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolResult:
    name: str
    output: str
    ok: bool = True
    error: str | None = None  # "timeout", "memory", "crash", "unknown_tool", ...
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. retrieved doc ids for metrics


@dataclass
class Turn:
    """One model call: the exact ids the model saw and the exact ids it sampled."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str  # decoded completion (without the prefill)
    finish_reason: str  # "stop" (stop string), "eos", "length"
    prefill: str = ""  # text the harness put at the start of the assistant turn (part of the prompt)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    parse_error: str | None = None


@dataclass
class Trajectory:
    task_id: str
    domain: str
    harness_id: str
    sample_index: int
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    final_answer: str | None = None
    reward: float = 0.0
    correct: bool = False
    flags: dict[str, Any] = field(default_factory=dict)  # behaviour metrics
    error: str | None = None  # why the episode ended abnormally, if it did
    timings: dict[str, float] = field(default_factory=dict)
    policy_version: int = 0  # weights step that sampled it
    seed: int = 0
    subset: str = "default"
    schema_version: int = SCHEMA_VERSION

    @property
    def generated_tokens(self) -> int:
        return sum(len(t.completion_ids) for t in self.turns)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        turns = []
        for t in data.pop("turns", []):
            t = dict(t)
            t["tool_calls"] = [ToolCall(**c) for c in t.get("tool_calls", [])]
            t["tool_results"] = [ToolResult(**r) for r in t.get("tool_results", [])]
            turns.append(Turn(**t))
        messages = [Message(**m) for m in data.pop("messages", [])]
        return cls(turns=turns, messages=messages, **data)
