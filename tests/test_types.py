"""Records: JSON round-trips, and the reference answer stays out of a harness's reach."""

from __future__ import annotations

import dataclasses
import gc
import json

from whalekit.types import Message, Task, ToolCall, ToolResult, Trajectory, Turn


def _reachable(root, depth=6):
    seen, frontier = set(), [root]
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield obj
            if dataclasses.is_dataclass(obj):
                nxt.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
            elif isinstance(obj, dict):
                nxt.extend(obj.keys())
                nxt.extend(obj.values())
            elif isinstance(obj, (list, tuple, set)):
                nxt.extend(obj)
            nxt.extend(r for r in gc.get_referents(obj) if not isinstance(r, type))
        frontier = nxt


def test_task_view_cannot_reach_the_reference_answer():
    secret = "the-secret-answer-42"
    task = Task(id="t", domain="toy", inputs={"question": "q", "nested": {"a": [1, 2]}}, reference=secret)
    view = task.view()
    assert not hasattr(view, "reference")
    assert all(obj is not task and obj != secret for obj in _reachable(view))
    view.inputs["nested"]["a"].append(3)  # a harness mutating its view leaves the task untouched
    assert task.inputs["nested"]["a"] == [1, 2]


def test_trajectory_round_trips_through_json():
    traj = Trajectory(task_id="t", domain="toy", harness_id="h", sample_index=2,
                      turns=[Turn([1, 2], [3, 4], "hi", "eos", "pre", [ToolCall("f", {"x": 1})],
                                  [ToolResult("f", "out", meta={"ids": [1]})])],
                      messages=[Message("user", "q"), Message("assistant", "prehi")], final_answer="a",
                      reward=1.0, correct=True, flags={"turns": 1})
    again = Trajectory.from_json(json.loads(json.dumps(traj.to_json())))
    assert again == traj
    assert again.generated_tokens == 2
