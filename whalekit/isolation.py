"""Running untrusted harness code: static validation, a dry run, and `IsolatedHarness`,
a `HarnessRuntime` whose hooks execute in a limited worker process.

Why: proposed harnesses are written by an LLM or by random edits. They must never run in
the driver's process, where a hang, a `sys.exit`, a memory bomb or a read of
ANTHROPIC_API_KEY would take the run (or its secrets) with it. Each candidate gets one
worker that serves all its episodes over a pipe of JSON lines. The worker starts with an
empty environment, CPU/address-space/file-size rlimits, no fork, its own network
namespace where the kernel allows (and a socket module that refuses either way), and
drops root. Every hook call has a wall-clock limit: an alarm inside the worker turns a
Python loop into an episode error; a hang the alarm cannot break kills the worker, and
the candidate ends as a recorded failure. The search goes on.

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
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.episode import Finished, GenerateRequest, Request, ToolRequest, harness_id
from whalekit.harness import GenerationSettings
from whalekit.samplers.base import is_choice_list
from whalekit.types import Message, TaskView, ToolCall, ToolResult

ALLOWED_IMPORTS = ("__future__", "re", "json", "math", "string", "textwrap", "collections", "itertools",
                   "functools", "dataclasses", "typing", "random", "chess", "whalekit.harness", "whalekit.types")
FORBIDDEN_CALLS = ("__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr",
                   "setattr", "delattr", "breakpoint", "input", "exit", "quit", "memoryview")
ALLOWED_DUNDERS = ("__init__", "__name__", "__doc__")
MAX_REPLY_BYTES = 64 << 20  # one hook's reply over the pipe; more is a harness bug (or an attack)


@dataclass
class IsolationLimits:
    hook_timeout_s: float = 5.0  # wall clock per hook call (and for loading the module)
    cpu_seconds: int = 300  # RLIMIT_CPU for the whole worker (all episodes of the candidate)
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
def encode_request(request: Request) -> dict[str, Any]:
    if isinstance(request, GenerateRequest):
        return {"type": "generate", "messages": [dataclasses.asdict(m) for m in request.messages],
                "settings": dataclasses.asdict(request.settings)}
    if isinstance(request, ToolRequest):
        return {"type": "tools", "calls": [dataclasses.asdict(c) for c in request.calls]}
    if isinstance(request, Finished):
        return {"type": "finished", "answer": request.answer, "error": request.error,
                "messages": [dataclasses.asdict(m) for m in request.messages]}
    raise TypeError(f"the episode returned {type(request).__name__}, not a request")


def _message(data: dict[str, Any]) -> Message:
    if data.get("role") not in ("system", "user", "assistant") or not isinstance(data.get("content"), str):
        raise TypeError(f"bad message from harness: role={data.get('role')!r}, content type "
                        f"{type(data.get('content')).__name__} (must be str)")
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
class IsolatedHarness:
    """A HarnessRuntime running one candidate's hooks in a worker process. After the
    worker dies or hangs, `failure` holds the reason and every episode ends with it."""

    def __init__(self, source: str, limits: IsolationLimits | None = None, harness_id_: str | None = None):
        self.source = source
        self.limits = limits or IsolationLimits()
        self.harness_id = harness_id_ or harness_id(source)
        self.failure: str | None = None
        self._next_episode = 0
        self._buffer = b""
        root = str(Path(__file__).resolve().parents[1])
        bootstrap = (f"import sys; sys.path.insert(0, {root!r}); "
                     "from whalekit.isolation import _worker_main; _worker_main()")
        self._proc = subprocess.Popen([sys.executable, "-I", "-c", bootstrap], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={}, cwd="/")
        self._loaded = False

    def _call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.failure:
            raise _WorkerGone(self.failure)
        try:
            assert self._proc.stdin is not None
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
        assert self._proc.stdout is not None
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
        self.close()
        raise _WorkerGone(self.failure)

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        reply = self._call({"op": "load", "source": self.source, "limits": dataclasses.asdict(self.limits)},
                           self.limits.start_timeout_s + self.limits.hook_timeout_s)
        if not reply.get("ok"):
            self.failure = str(reply.get("error", "load_error: ?"))
            self.close()
            raise _WorkerGone(self.failure)
        self.protections = reply.get("protections", {})
        self._loaded = True

    def episode_call(self, message: dict[str, Any]) -> Request:
        try:
            self._ensure_loaded()
            reply = self._call(message, self.limits.hook_timeout_s + 2.0)
        except _WorkerGone as gone:
            return Finished(None, str(gone))
        if "error" in reply:
            return Finished(None, reply["error"])
        try:
            return decode_request(reply["request"])
        except (KeyError, TypeError, ValueError) as exc:
            return Finished(None, f"harness_error: {exc}")

    def new_episode(self, task: TaskView) -> _EpisodeProxy:
        self._next_episode += 1
        return _EpisodeProxy(self, self._next_episode, task)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream and not stream.closed:
                stream.close()

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
    def __init__(self, runtime: IsolatedHarness, episode_id: int, task: TaskView):
        self.runtime, self.episode_id, self.task = runtime, episode_id, task

    def begin(self) -> Request:
        return self.runtime.episode_call({"op": "begin", "episode": self.episode_id,
                                          "task": dataclasses.asdict(self.task)})

    def after_generation(self, completion_text: str, prefill: str = "") -> Request:
        return self.runtime.episode_call({"op": "generation", "episode": self.episode_id,
                                          "text": completion_text, "prefill": prefill})

    def after_tools(self, results: list[ToolResult]) -> Request:
        return self.runtime.episode_call({"op": "tools", "episode": self.episode_id,
                                          "results": [dataclasses.asdict(r) for r in results]})


# ---- the worker side ------------------------------------------------------------------------
class _HookTimeout(BaseException):  # BaseException: `except Exception` in a harness cannot swallow it
    pass


def _lock_down(limits: dict[str, Any]) -> dict[str, bool]:
    """Apply the limits to this (fresh, single-threaded) worker process; report which held."""
    import ctypes
    import resource
    import socket

    done: dict[str, bool] = {}
    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (int(limits["cpu_seconds"]), int(limits["cpu_seconds"]) + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    flags = clone_newnet if os.geteuid() == 0 else clone_newnet | clone_newuser
    done["net_namespace"] = libc.unshare(flags) == 0
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        except OSError:
            pass
    done["dropped_root"] = os.geteuid() != 0
    if os.geteuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    done["no_fork"] = os.geteuid() != 0

    def refuse(*_: Any, **__: Any) -> Any:
        raise PermissionError("network and processes are disabled in a harness worker")

    socket.socket = refuse  # type: ignore[assignment, misc]
    socket.create_connection = refuse  # type: ignore[assignment]
    for name in ("system", "popen", "fork", "forkpty", "execv", "execve", "spawnv", "spawnve", "posix_spawn"):
        if hasattr(os, name):
            setattr(os, name, refuse)
    subprocess.Popen = refuse  # type: ignore[assignment, misc]
    return done


def _worker_main() -> None:
    import signal

    from whalekit.episode import EpisodeDriver, load_harness

    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # harness prints must not corrupt the pipe
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    inbox = sys.stdin.buffer
    harness = None
    drivers: dict[int, EpisodeDriver] = {}
    timeout = 5.0

    def on_alarm(*_: Any) -> None:
        raise _HookTimeout()

    signal.signal(signal.SIGALRM, on_alarm)

    while True:
        line = inbox.readline()
        if not line:
            return
        message = json.loads(line)
        op = message["op"]
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:  # everything, encoding included, runs under the alarm; the write after it does not
            if op == "load":
                limits = message["limits"]
                timeout = float(limits["hook_timeout_s"])
                protections = _lock_down(limits)
                signal.setitimer(signal.ITIMER_REAL, timeout)
                harness = load_harness(message["source"])
                text = json.dumps({"ok": True, "protections": protections})
            else:
                episode = int(message["episode"])
                if op == "begin":
                    task = message["task"]
                    drivers[episode] = EpisodeDriver(harness, TaskView(task["id"], task["domain"], task["inputs"],
                                                                       task.get("subset", "default")))
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
        except _HookTimeout:
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
