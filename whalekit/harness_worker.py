"""The worker side of an isolated harness: runs one candidate's hooks inside the sandbox.

This module, `whalekit.harness`, `whalekit.types`, `whalekit.episode` and the display-only
`whalekit.harness_helpers` are the whole of whalekit a harness worker can import: they are
mounted into its sandbox (see `whalekit.sandbox.isolation.worker_spec`), under an empty
`whalekit/__init__.py`, so `import whalekit.harness` does not bring the package's
registries, data loaders or splits. It reads requests as JSON lines on stdin and answers
each on stdout. Every episode gets a fresh module namespace and a fresh harness instance,
so a harness's module or instance state cannot carry anything from one episode to the
next. Each hook call runs under a wall-clock alarm and a CPU-seconds limit of its own; the
parent kills the worker when a hook outlives both.

    python -c "from whalekit.harness_worker import main; main()"   # inside the sandbox only
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import signal
import sys
import traceback
from typing import Any

from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, Request, ToolRequest, load_harness
from whalekit.types import TaskView, ToolResult


class HookTimeout(BaseException):  # BaseException: `except Exception` in a harness cannot swallow it
    pass


def encode_request(request: Request) -> dict[str, Any]:
    """A request as plain JSON for the pipe (the parent checks every field when decoding)."""
    if isinstance(request, GenerateRequest):
        return {"type": "generate", "messages": [dataclasses.asdict(m) for m in request.messages],
                "settings": dataclasses.asdict(request.settings)}
    if isinstance(request, ToolRequest):
        return {"type": "tools", "calls": [dataclasses.asdict(c) for c in request.calls]}
    if isinstance(request, Finished):
        return {"type": "finished", "answer": request.answer, "error": request.error,
                "messages": [dataclasses.asdict(m) for m in request.messages]}
    raise TypeError(f"the episode returned {type(request).__name__}, not a request")


def _apply_limits(limits: dict[str, Any]) -> None:
    memory = int(limits["memory_mb"]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def _cpu_budget(seconds: float) -> None:
    """Give the next hook `seconds` of CPU time from now (SIGXCPU past it)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    now = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(math.ceil(now + seconds)) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def main() -> None:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # harness prints must not corrupt the pipe
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    inbox = sys.stdin.buffer
    source: str | None = None
    drivers: dict[int, EpisodeDriver] = {}
    timeout = 5.0

    def on_alarm(*_: Any) -> None:
        raise HookTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    while True:
        line = inbox.readline()
        if not line:
            return
        message = json.loads(line)
        op = message["op"]
        _cpu_budget(timeout)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:  # everything, encoding included, runs under the alarm; the write after it does not
            if op == "load":
                limits = message["limits"]
                timeout = float(limits["hook_timeout_s"])
                _apply_limits(limits)
                source = message["source"]
                load_harness(source)  # fail fast on a module that does not load
                text = json.dumps({"ok": True, "protections": {"sandbox": os.environ.get("WHALEKIT_SANDBOX", "")}})
            else:
                episode = int(message["episode"])
                if op == "begin":
                    task = message["task"]
                    view = TaskView(task["id"], task["domain"], task["inputs"], task.get("subset", "default"))
                    drivers[episode] = EpisodeDriver(load_harness(source or ""), view)  # fresh module and instance
                    request = drivers[episode].begin()
                elif op == "generation":
                    request = drivers[episode].after_generation(message["text"], message["prefill"])
                elif op == "tools":
                    request = drivers[episode].after_tools([ToolResult(**r) for r in message["results"]])
                else:
                    raise ValueError(f"unknown op {op!r}")
                text = json.dumps({"request": encode_request(request)})  # not JSON-able: the harness's error
                if isinstance(request, Finished):
                    drivers.pop(episode, None)
        except HookTimeout:
            drivers.pop(message.get("episode"), None)
            text = json.dumps({"error": f"hook_timeout: a hook ran longer than {timeout:.1f}s", "ok": False})
        except BaseException as exc:  # noqa: BLE001 - SystemExit, MemoryError, ...: all are the harness's failure
            drivers.pop(message.get("episode"), None)
            where = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-2:])[-600:]
            prefix = "load_error" if op == "load" else "harness_error"
            text = json.dumps({"error": f"{prefix}: {type(exc).__name__}: {exc}\n{where}".strip(), "ok": False})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out.write(text + "\n")
        out.flush()
