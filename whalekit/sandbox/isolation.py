"""Running untrusted harness code: static validation, a dry run, and `IsolatedHarness`,
a `HarnessRuntime` whose hooks execute in a worker process behind the sandbox.

Why: proposed harnesses are written by an LLM or by random edits. They must never run in
the driver's process, where a hang, a `sys.exit`, a memory bomb or a read of
ANTHROPIC_API_KEY would take the run (or its secrets) with it, and they must not see what
would let them cheat: reference answers, test splits, run directories, rival candidates.

What holds it (the boundary is `whalekit.sandbox.bwrap`, bubblewrap; see its docstring for every
layer): each candidate gets one worker in its own sandbox, which sees the interpreter, its
standard library and exactly `worker_spec()`'s files -- `whalekit.harness`, `.types`,
`.episode`, `.harness_worker` and the display-only `whalekit.harness_helpers`, under an
empty package `__init__` -- and nothing else of the host: no `whalekit.domains`, no data,
no run directory, no network, no other process. A fresh module and harness instance per
episode. Every hook call has a wall-clock limit and its own CPU-seconds limit: an alarm
inside the worker turns a Python loop into an episode error; a hang the alarm cannot break
kills the worker, and the candidate ends as a recorded failure. The search goes on.

`validate_source` is the first filter, for fast, readable feedback to the proposer (an
allow-list of imports, no dynamic code or private attributes); nothing relies on it for
security. What is not protected: a candidate can spend its CPU and memory limits, and a
harness's output is whatever it returns (the driver type-checks it).

    problem = validate_candidate(source, task.view())        # None, or the reason to tell the proposer
    runtime = IsolatedHarness(source); rollout(domain, [Episode(task, runtime)], sampler); runtime.close()
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.episode import Finished, GenerateRequest, Request, ToolRequest, harness_id
from whalekit.harness import GenerationSettings
from whalekit.samplers.base import is_choice_list
from whalekit.sandbox.bwrap import SandboxSpec, isolation_mode, probe_isolation, sandbox_launch
from whalekit.types import Message, TaskView, ToolCall, ToolResult

ALLOWED_IMPORTS = ("__future__", "re", "json", "math", "string", "textwrap", "collections", "itertools",
                   "functools", "dataclasses", "typing", "random", "whalekit.harness", "whalekit.types",
                   "whalekit.harness_helpers")
# Attributes that reach interpreter internals (frames, code, builtins) without a dunder name.
FORBIDDEN_ATTRIBUTES = ("f_globals", "f_builtins", "f_locals", "f_back", "f_code", "tb_frame", "tb_next",
                        "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_consts", "modules",
                        "sys", "os", "builtins", "importlib")
FORBIDDEN_CALLS = ("__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr",
                   "setattr", "delattr", "breakpoint", "input", "exit", "quit", "memoryview")
ALLOWED_DUNDERS = ("__init__", "__name__", "__doc__")
MAX_REPLY_BYTES = 64 << 20  # one hook's reply over the pipe; more is a harness bug (or an attack)


@dataclass
class IsolationLimits:
    hook_timeout_s: float = 5.0  # wall clock per hook call (and for loading the module)
    cpu_seconds: int = 300  # deprecated: CPU is limited per hook call (hook_timeout_s), not per worker
    memory_mb: int = 1024  # RLIMIT_AS of the worker
    start_timeout_s: float = 30.0  # worker start-up (interpreter + imports)

    def __post_init__(self) -> None:
        if min(self.hook_timeout_s, self.cpu_seconds, self.memory_mb, self.start_timeout_s) <= 0:
            raise ValueError("isolation limits must be positive")


# ---- static validation ------------------------------------------------------------------
def _import_allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED_IMPORTS)


def validate_source(source: str) -> str | None:
    """Static checks, before anything runs: parses, exactly one Harness subclass, imports
    from the allow-list only, no dynamic code or dunder escape hatches. Returns the reason
    for rejection (phrased for the proposer) or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    # getattr(obj, "name"[, default]) with a literal, non-dunder name is plain attribute access.
    safe_getattr = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                    and n.func.id == "getattr" and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)
                    and isinstance(n.args[1].value, str) and not n.args[1].value.startswith("__")}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if not _import_allowed(a.name)]
            if bad:
                return f"line {line}: import of {', '.join(bad)} is not allowed (allowed: {', '.join(ALLOWED_IMPORTS)})"
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module or not _import_allowed(node.module):
                allowed = ", ".join(ALLOWED_IMPORTS)
                return f"line {line}: import from {node.module!r} is not allowed (allowed: {allowed})"
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_CALLS and id(node) not in safe_getattr:
            return f"line {line}: use of {node.id!r} is not allowed in a harness"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
            return f"line {line}: access to attribute {node.attr!r} is not allowed in a harness"
        elif isinstance(node, ast.Attribute) and (node.attr in FORBIDDEN_ATTRIBUTES or (
                node.attr.startswith("_") and not node.attr.startswith("__"))):
            return f"line {line}: access to attribute {node.attr!r} is not allowed in a harness (interpreter internals)"
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"line {line}: global/nonlocal state is not allowed; keep memory in state.scratch"
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(
        (isinstance(b, ast.Name) and b.id == "Harness") or (isinstance(b, ast.Attribute) and b.attr == "Harness")
        for b in n.bases)]
    if len(classes) != 1:
        return f"a harness module must define exactly one class deriving from Harness, found {len(classes)}"
    return None


def validate_candidate(source: str, task: TaskView, limits: IsolationLimits | None = None) -> str | None:
    """Static validation, then a dry run of one episode in an isolated worker with a
    canned model reply and canned tool results. Costs no rollout budget."""
    problem = validate_source(source)
    if problem:
        return problem
    runtime = IsolatedHarness(source, limits)
    try:
        handle = runtime.new_episode(task)
        request = handle.begin()
        for _ in range(6):
            if isinstance(request, Finished):
                break
            if isinstance(request, GenerateRequest):
                request = handle.after_generation("The answer is 42.", request.settings.prefill)
            else:
                request = handle.after_tools([ToolResult(c.name, "(dry-run tool output)") for c in request.calls])
        if isinstance(request, Finished) and request.error:
            return f"dry run failed: {request.error[:500]}"
        return None
    finally:
        runtime.close()


# ---- wire format (plain JSON) -------------------------------------------------------------
MESSAGE_ROLES = ("system", "user", "assistant")


def _message(data: dict[str, Any]) -> Message:
    """A message from the worker; what is wrong with a bad one is named (a proposer's repair
    turn shows the model this text)."""
    problems = []
    if data.get("role") not in MESSAGE_ROLES:
        problems.append(f"role {data.get('role')!r} is not one of {', '.join(map(repr, MESSAGE_ROLES))}")
    if not isinstance(data.get("content"), str):
        problems.append(f"content is of type {type(data.get('content')).__name__}, not str")
    if problems:
        raise TypeError("bad message from harness: " + "; ".join(problems))
    return Message(data["role"], data["content"], str(data.get("kind", "text")))


def decode_request(data: dict[str, Any]) -> Request:
    """Rebuild a request from the worker, checking every field's type: the worker is untrusted."""
    kind = data.get("type")
    if kind == "generate":
        s = data["settings"]
        choices = s.get("choices")
        if not isinstance(s.get("max_new_tokens"), int) or s["max_new_tokens"] <= 0 \
                or not all(isinstance(x, str) for x in s.get("stop", [])) or not isinstance(s.get("prefill"), str) \
                or not (choices is None or (isinstance(choices, list) and is_choice_list(choices))):
            raise TypeError(f"bad generation settings from harness: {s!r}")
        return GenerateRequest([_message(m) for m in data["messages"]],
                               GenerationSettings(s["max_new_tokens"], list(s["stop"]), s["prefill"],
                                                  None if choices is None else list(choices)))
    if kind == "tools":
        calls = [ToolCall(str(c["name"]), c["arguments"]) for c in data["calls"]]
        return ToolRequest(calls)
    if kind == "finished":
        answer = data.get("answer")
        return Finished(None if answer is None else str(answer), data.get("error"),
                        [_message(m) for m in data.get("messages", [])])
    raise TypeError(f"unknown request type {kind!r} from worker")


# ---- the parent side ----------------------------------------------------------------------
KIT_MODULES = ("harness.py", "types.py", "episode.py", "harness_worker.py")
_BOOTSTRAP = "from whalekit.harness_worker import main; main()"


def worker_spec() -> SandboxSpec:
    """What a harness worker's sandbox holds of whalekit: the contract, the episode driver,
    the worker loop and the display-only helpers, under an empty package `__init__`."""
    package = Path(__file__).resolve().parents[1]  # whalekit/
    files = [(str(package / name), f"lib/whalekit/{name}") for name in KIT_MODULES]
    helpers = package / "harness_helpers"
    if helpers.is_dir():
        files.append((str(helpers), "lib/whalekit/harness_helpers"))
    return SandboxSpec(files=tuple(files), generated=(('"""whalekit, as a harness worker sees it."""\n',
                                                       "lib/whalekit/__init__.py"),), nproc=1, tmp_mb=1)


class IsolatedHarness:
    """A HarnessRuntime running one candidate's hooks in a sandboxed worker process. After
    the worker dies or hangs, `failure` holds the reason and its episodes end with it; with
    `respawn` (the accepted harness, which serves every later stage) the next episode starts
    a fresh worker, and `deaths` counts how often that happened."""

    def __init__(self, source: str, limits: IsolationLimits | None = None, harness_id_: str | None = None,
                 respawn: bool = False):
        self.source = source
        self.limits = limits or IsolationLimits()
        self.harness_id = harness_id_ or harness_id(source)
        self.respawn = respawn
        self.failure: str | None = None
        self.deaths = 0
        self.generation = 0  # which worker: episodes begun in a dead one end with its failure
        self.protections: dict[str, Any] = {}
        self._dead_reasons: dict[int, str] = {}  # worker generation -> why it died
        self._next_episode = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._start()

    def _start(self) -> None:
        self._buffer = b""
        self._loaded = False
        self.generation += 1
        if isolation_mode() == "none":  # trusted code, debugging only (set_isolation_mode warned)
            root = str(Path(__file__).resolve().parents[2])
            argv = [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {root!r}); {_BOOTSTRAP}"]
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env={}, cwd="/", start_new_session=True)
            return
        probe_isolation()  # a missing layer is an error that says how to get it, never a silent downgrade
        self._proc = sandbox_launch(worker_spec(), [_BOOTSTRAP]).popen(
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)

    def _call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.failure:
            raise _WorkerGone(self.failure)
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail("worker_crash: the worker exited")
        line = self._read_line(timeout)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self._fail("worker_crash: unreadable reply from the worker")
            raise

    def _read_line(self, timeout: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        chunks, size = [self._buffer], len(self._buffer)
        while b"\n" not in chunks[-1]:  # only the newest chunk can hold the first newline
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                self._fail(f"hook_timeout: a hook ran longer than {timeout:.1f}s; worker killed")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                try:
                    code = self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._fail("worker_crash: the worker closed its pipe")
                if code > 128:  # the sandbox's init reports a child killed by signal s as 128 + s
                    code = -(code - 128)
                if code == -24:  # SIGXCPU: the hook's own CPU-seconds limit
                    self._fail(f"hook_timeout: a hook used more than {self.limits.hook_timeout_s:.1f}s of CPU; "
                               "worker killed")
                self._fail(f"worker_crash: the worker exited with code {code}" +
                           (" (killed: CPU or memory limit, or a signal)" if code < 0 else ""))
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                self._fail(f"harness_error: a reply from the worker exceeded {MAX_REPLY_BYTES >> 20} MiB")
        line, self._buffer = b"".join(chunks).split(b"\n", 1)
        return line

    def _fail(self, reason: str) -> None:
        self.failure = self.failure or reason
        self.deaths += 1
        self._stop()
        raise _WorkerGone(self.failure)

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        reply = self._call({"op": "load", "source": self.source, "limits": dataclasses.asdict(self.limits)},
                           self.limits.start_timeout_s + self.limits.hook_timeout_s)
        if not reply.get("ok"):
            self.failure = str(reply.get("error", "load_error: ?"))
            self._stop()
            raise _WorkerGone(self.failure)
        self.protections = reply.get("protections", {})
        self._loaded = True

    def episode_call(self, message: dict[str, Any], generation: int | None = None) -> Request:
        if generation is not None and generation != self.generation:
            return Finished(None, self._dead_reasons.get(generation, "worker_crash: the worker was replaced"))
        try:
            self._ensure_loaded()
            reply = self._call(message, self.limits.hook_timeout_s + 2.0)
        except _WorkerGone as gone:
            self._dead_reasons[self.generation] = str(gone)
            return Finished(None, str(gone))
        if "error" in reply:
            return Finished(None, reply["error"])
        try:
            return decode_request(reply["request"])
        except (KeyError, TypeError, ValueError) as exc:
            return Finished(None, f"harness_error: {exc}")

    def new_episode(self, task: TaskView) -> _EpisodeProxy:
        if self.failure and self.respawn and not self.failure.startswith("load_error"):
            self._dead_reasons[self.generation] = self.failure
            self.failure = None
            self._stop()
            self._start()
        self._next_episode += 1
        return _EpisodeProxy(self, self._next_episode, task, self.generation)

    def _stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream and not stream.closed:
                stream.close()

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> IsolatedHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()


class _WorkerGone(Exception):
    pass


class _EpisodeProxy:
    def __init__(self, runtime: IsolatedHarness, episode_id: int, task: TaskView, generation: int):
        self.runtime, self.episode_id, self.task, self.generation = runtime, episode_id, task, generation

    def begin(self) -> Request:
        return self.runtime.episode_call({"op": "begin", "episode": self.episode_id,
                                          "task": dataclasses.asdict(self.task)}, self.generation)

    def after_generation(self, completion_text: str, prefill: str = "") -> Request:
        return self.runtime.episode_call({"op": "generation", "episode": self.episode_id,
                                          "text": completion_text, "prefill": prefill}, self.generation)

    def after_tools(self, results: list[ToolResult]) -> Request:
        return self.runtime.episode_call({"op": "tools", "episode": self.episode_id,
                                          "results": [dataclasses.asdict(r) for r in results]}, self.generation)
