"""The Python tool: model-written code run in a fresh sandboxed interpreter, under limits.

The boundary itself (what the process can see and do) is `whalekit.sandbox.bwrap`; this module
adds what a tool call needs on top of it: CPU, memory, file-size and process limits set
inside the sandbox before the code runs, a wall clock and an output cap enforced from
outside, and a classification of how the run ended (`ERRORS`) that the model is shown in
plain words. `run_python` never raises for anything the code does: a harness's tool call
always gets a result.

    result = run_python("print(sum(range(10)))", SandboxLimits(wall_s=5))
    result.stdout, result.error   # ('45\\n', None)
"""

from __future__ import annotations

import functools
import importlib.util
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from whalekit.sandbox.bwrap import SandboxSpec, SandboxUnavailable, isolation_mode, probe_isolation, sandbox_launch
from whalekit.types import ToolResult

ERRORS = ("timeout", "memory", "output_limit", "killed", "crash", "exception", "syntax_error", "sandbox_error")
PYTHON_TOOL_PACKAGES = ("sympy", "mpmath", "numpy")  # what model-written code may import beyond the stdlib


@functools.lru_cache(maxsize=1)
def _python_tool_packages() -> tuple[str, ...]:
    """The PYTHON_TOOL_PACKAGES installed here (looked up once, not per tool call)."""
    return tuple(p for p in PYTHON_TOOL_PACKAGES if importlib.util.find_spec(p))


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # wall-clock seconds before the sandbox is killed
    cpu_s: int = 10  # CPU seconds (per process) before SIGXCPU
    memory_mb: int = 1024  # address-space limit per process
    output_bytes: int = 16_000  # stdout + stderr kept; more kills the run ("output_limit")
    file_mb: int = 16  # largest file the code may write (in its private /tmp)
    nproc: int = 8  # processes (and threads) the code may have at once

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.cpu_s <= 0 or self.memory_mb < 64 or self.output_bytes <= 0 or self.nproc < 1:
            raise ValueError(f"sandbox limits must be positive (memory_mb >= 64): {self}")


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal; None: never started
    error: str | None  # one of ERRORS, or None when the code ran to a clean exit
    wall_s: float
    truncated: bool = False  # output went past `output_bytes`
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_tool_result(self, name: str = "python") -> ToolResult:
        """The text a harness shows the model: stdout, then stderr, then why it stopped."""
        parts = [self.stdout.rstrip("\n")] if self.stdout.strip() else []
        if self.stderr.strip():
            parts.append(self.stderr.rstrip("\n"))
        if self.error in _EXPLANATIONS:
            parts.append(_EXPLANATIONS[self.error].format(**self.details))
        elif self.error and not self.stderr.strip():
            parts.append(f"Error: the code exited with status {self.exit_code}.")
        output = "\n".join(parts)
        meta = {"exit_code": self.exit_code, "wall_s": round(self.wall_s, 3), "truncated": self.truncated}
        return ToolResult(name, output, ok=self.ok, error=self.error, meta=meta)


_EXPLANATIONS = {
    "timeout": "Error: the code ran out of time ({limit}) and was stopped.",
    "memory": "Error: the code ran out of memory and was stopped.",
    "output_limit": "Error: the code printed more than {limit} bytes and was stopped.",
    "killed": "Error: the code was killed by signal {signal}.",
    "crash": "Error: the interpreter crashed (signal {signal}).",
    "sandbox_error": "Error: the sandbox could not start: {reason}",
}

# The Python tool's program (after the prelude): limits, then the model's code from stdin,
# with tracebacks that show only the model's own frames.
_RUNNER = r'''
import resource, signal, sys, traceback
cpu, memory, fsize = (int(x) for x in sys.argv[1:4])
MB = 1 << 20
for which, soft, hard in ((resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_AS, memory * MB, memory * MB),
                          (resource.RLIMIT_FSIZE, fsize * MB, fsize * MB), (resource.RLIMIT_NOFILE, 256, 256)):
    resource.setrlimit(which, (soft, hard))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write becomes an OSError
code = sys.stdin.buffer.read().decode("utf-8", "replace")
sys.argv = ["<code>"]
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(code, "<code>", "exec"), namespace)
except MemoryError:
    sys.stderr.write("MemoryError: out of memory\n")
    sys.exit(1)
except SystemExit:
    raise
except BaseException as exc:
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    shown.stack = traceback.StackSummary.from_list([f for f in shown.stack if f.filename == "<code>"])
    sys.stderr.write("".join(shown.format()))
    sys.exit(1)
'''


def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` in a fresh sandboxed interpreter; never raises for anything the code does."""
    limits = limits or SandboxLimits()
    start = time.perf_counter()
    proc: subprocess.Popen[bytes] | None = None
    try:
        args = [_RUNNER, str(int(limits.cpu_s)), str(limits.memory_mb), str(limits.file_mb)]
        try:
            if isolation_mode() == "none":
                proc = subprocess.Popen([sys.executable, "-I", "-B", "-c", _RUNNER, *args[1:]], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={},
                                        start_new_session=True)
            else:
                probe_isolation()
                spec = SandboxSpec(packages=_python_tool_packages(),
                                   nproc=limits.nproc, tmp_mb=max(limits.file_mb * 2, 16), python_path=())
                proc = sandbox_launch(spec, args).popen(stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE, start_new_session=True)
        except (OSError, SandboxUnavailable) as exc:
            return SandboxResult("", "", None, "sandbox_error", time.perf_counter() - start,
                                 details={"reason": f"{type(exc).__name__}: {exc}"})
        stdout, stderr, timed_out, overflow = _communicate(proc, code.encode("utf-8", "replace"), limits)
        _kill_group(proc)
        exit_code = proc.wait()
        wall = time.perf_counter() - start
        out, err = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
        error, details = _classify(exit_code, err, timed_out, overflow, limits)
        return SandboxResult(out, err, exit_code, error, wall, truncated=overflow, details=details)
    except Exception as exc:  # the caller must always get a result
        return SandboxResult("", "", None, "sandbox_error", time.perf_counter() - start,
                             details={"reason": f"{type(exc).__name__}: {exc}"})
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc)
            proc.wait()


def _communicate(proc: subprocess.Popen[bytes], code: bytes, limits: SandboxLimits) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin, read both pipes under the wall-clock deadline and the output cap."""
    assert proc.stdin and proc.stdout and proc.stderr

    def feed() -> None:
        try:
            proc.stdin.write(code)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    deadline = time.monotonic() + limits.wall_s
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    total = 0
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdout, proc.stderr):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), True, False
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # a leftover child holds the pipes open: it dies with the sandbox
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                total += len(chunk)
                buffers[key.fd] += chunk
                if total > limits.output_bytes:
                    _kill_group(proc)
                    out, err = buffers[proc.stdout.fileno()], buffers[proc.stderr.fileno()]
                    keep = limits.output_bytes
                    return bytes(out[:keep]), bytes(err[:max(0, keep - len(out))]), False, True
    return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), False, False


def _classify(exit_code: int, stderr: str, timed_out: bool, overflow: bool,
              limits: SandboxLimits) -> tuple[str | None, dict[str, Any]]:
    if timed_out:
        return "timeout", {"limit": f"{limits.wall_s:g} s wall clock"}
    if overflow:
        return "output_limit", {"limit": limits.output_bytes}
    if exit_code == 0:
        return None, {}
    if exit_code < 0 or exit_code > 128:  # bwrap's init reports a child killed by signal s as 128 + s
        sig = -exit_code if exit_code < 0 else exit_code - 128
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        if sig == signal.SIGXCPU:
            return "timeout", {"limit": f"{limits.cpu_s} s CPU"}
        if sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE):
            return "crash", {"signal": name}
        return "killed", {"signal": name}
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if last.startswith("MemoryError"):
        return "memory", {}
    if last.startswith(("SyntaxError", "IndentationError", "TabError")):
        return "syntax_error", {}
    return "exception", {}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the sandbox: bwrap's process group (its namespace's init takes everything inside with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["ERRORS", "PYTHON_TOOL_PACKAGES", "SandboxLimits", "SandboxResult", "run_python"]
