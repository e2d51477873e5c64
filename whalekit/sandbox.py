"""Run model-written Python in a separate, limited process, so no code the model
writes can hang, crash, leak secrets from or reach outside the run that called it.

Each call starts a fresh interpreter in its own session, with an empty environment,
inside a scratch directory that is deleted afterwards. Layers, strongest first, each
used where the OS allows it (`probe_isolation()` says which are active):

* new network, PID, IPC and mount namespaces (a user namespace too when not root): no
  network at all; no process outside the sandbox is visible or killable; every mount
  is read-only except the scratch directory; a fresh /proc;
* every capability dropped (and no-new-privileges), so the code cannot undo the above
  or raise its own limits even when the caller is root;
* resource limits: CPU seconds, address space, file size, open files;
* audit hooks inside the interpreter: writes outside the scratch directory, starting
  programs, forking, loading native libraries, reading other processes' /proc entries,
  and (when no namespaces could be made) signalling other processes and creating
  sockets all raise PermissionError. Hooks are a second line, not a boundary: native
  code could get around them, which is why the namespaces come first.

The caller enforces the wall-clock limit and the output cap, killing the whole process
group. Every failure comes back as a `SandboxResult` with an `error` name, never as an
exception in the caller. Calls are independent processes, so many can run at once
(from threads: nothing here uses `preexec_fn`).

    result = run_python("print(sum(range(10)))", SandboxLimits(wall_s=5))
    result.stdout, result.error   # ('45\\n', None)
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from whalekit.types import ToolResult

ERRORS = ("timeout", "memory", "output_limit", "killed", "crash", "exception", "syntax_error", "sandbox_error")


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # wall-clock seconds before the whole process group is killed
    cpu_s: int = 10  # CPU seconds (per process) before SIGXCPU
    memory_mb: int = 1024  # address-space limit per process
    output_bytes: int = 16_000  # stdout + stderr kept; more kills the run ("output_limit")
    file_mb: int = 16  # largest file the code may write in its scratch directory
    namespaces: bool = True  # use Linux namespaces where allowed; False tests the audit-hook fallback

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.cpu_s <= 0 or self.memory_mb < 64 or self.output_bytes <= 0:
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

# Runs as `python -I -B -X utf8 -c _BOOTSTRAP <config json>`; the model's code arrives on stdin.
_BOOTSTRAP = r'''
import ctypes, json, os, resource, signal, sys, traceback
cfg = json.loads(sys.argv[1])
code = sys.stdin.buffer.read().decode("utf-8", "replace")
scratch = os.path.realpath(cfg["scratch"])
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
layers = []
NEWNS, NEWNET, NEWPID, NEWIPC, NEWUSER = 0x20000, 0x40000000, 0x20000000, 0x08000000, 0x10000000
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
LOCKED = {"nosuid": NOSUID, "nodev": NODEV, "noexec": NOEXEC, "noatime": 1024, "nodiratime": 2048,
          "relatime": 1 << 21, "strictatime": 1 << 24}

def readonly_fs():
    # Every mount becomes read-only except a bind mount of the scratch directory.
    if libc.mount(b"none", b"/", None, REC | PRIVATE, None) != 0:
        return False
    if libc.mount(scratch.encode(), scratch.encode(), None, BIND, None) != 0:
        return False
    entries = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            entries.append((point, sum(LOCKED.get(o, 0) for o in fields[5].split(","))))
    ok = True
    for point, flags in entries:
        rw = point == scratch
        if libc.mount(None, point.encode(), None, REMOUNT | BIND | flags | (0 if rw else RDONLY), None) != 0:
            ok = False  # that mount stays as it was; the audit hooks still guard writes
    return ok

pidns = False
if cfg["namespaces"]:
    ALL = NEWNS | NEWNET | NEWPID | NEWIPC
    for flags, label in ((ALL, "netns"), (NEWUSER | ALL, "userns+netns")):
        if libc.unshare(flags) == 0:
            layers += [label, "pidns"]
            pidns = True
            if readonly_fs():
                layers.append("readonly-fs")
            os.chdir(scratch)  # the old working directory still points into the read-only mount
            break
if pidns:
    # Three processes: a relay outside the namespace (the caller's child), an init inside
    # it that only reaps, and the worker that runs the code. The worker is not the init,
    # so signals it sends itself (abort, raise) act as they would anywhere else.
    reader, writer = os.pipe()
    if os.fork():  # the relay: end the way the worker ended
        os.close(writer)
        os.close(0)
        os.wait()
        report = os.read(reader, 64).decode()
        if report.startswith("signal:"):
            sig = int(report[7:])
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(int(report) if report.lstrip("-").isdigit() else 1)
    os.close(reader)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the relay
    if libc.mount(b"proc", b"/proc", b"proc", NOSUID | NODEV | NOEXEC, None) == 0:
        layers.append("procfs")
    worker = os.fork()
    if worker:  # the namespace's init
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == worker:
                break
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        os.write(writer, (f"signal:{sig}" if sig else str(os.waitstatus_to_exitcode(status))).encode())
        os._exit(0)  # every process left in the namespace dies with it
    os.close(writer)
    libc.prctl(1, signal.SIGKILL)
MB = 1024 * 1024
for which, soft, hard in ((resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1),
                          (resource.RLIMIT_AS, cfg["memory_mb"] * MB, cfg["memory_mb"] * MB),
                          (resource.RLIMIT_FSIZE, cfg["file_mb"] * MB, cfg["file_mb"] * MB),
                          (resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_NOFILE, 256, 256)):
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        resource.setrlimit(which, (min(soft, resource.getrlimit(which)[1]),) * 2)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write becomes an OSError
layers.append("rlimits")
if pidns or os.geteuid() == 0:  # drop every capability: no remounts, no raised limits, no privileged calls
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) == 0:
        layers.append("nocaps")
sockets_blocked = not pidns
layers.append("hooks" + ("+nosocket" if sockets_blocked else ""))
os.environ.clear()
os.environ.update({"HOME": scratch, "TMPDIR": scratch, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1", "WHALEKIT_SANDBOX": ",".join(layers)})
own_pid = os.getpid()
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
busy = []

def inside(path):
    if isinstance(path, int):
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == scratch or real.startswith(scratch + os.sep) or real == "/dev/null"

def foreign_proc(path):
    if isinstance(path, int):
        return False
    parts = os.path.realpath(os.fsdecode(path)).split(os.sep)
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != own_pid

def deny(what):
    raise PermissionError(f"sandbox: {what} is not allowed")

PATH_ARGS = {"os.mkdir": (0,), "os.rmdir": (0,), "os.remove": (0,), "os.truncate": (0,), "os.chmod": (0,),
             "os.chown": (0,), "os.utime": (0,), "os.chflags": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
             "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,), "os.rename": (0, 1),
             "os.link": (0, 1), "os.symlink": (1,)}
BLOCKED = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "os.fork", "os.forkpty",
           "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.addressof", "ctypes.cdata"}
NATIVE_MODULES = {"_xxsubinterpreters"}
SOCKET_EVENTS = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto"}

def guard(event, args):
    if busy:
        return
    busy.append(1)
    try:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and not inside(path):
                deny(f"writing {path!r} outside the scratch directory")
            if foreign_proc(path):
                deny(f"reading {path!r}")
        elif event in PATH_ARGS:
            for path in (args[i] for i in PATH_ARGS[event]):
                if path is not None and not inside(path):
                    deny(f"{event} on {path!r} outside the scratch directory")
        elif event in BLOCKED:
            deny(f"{event} (new processes, programs and native code)")
        elif event == "import" and args[0] in NATIVE_MODULES:
            deny(f"importing {args[0]}")
        elif event in ("os.kill", "os.killpg") and not pidns and args[0] != own_pid:
            deny(f"sending signals to other processes ({event} {args[0]})")
        elif sockets_blocked and event in SOCKET_EVENTS:
            deny("network access")
    finally:
        busy.pop()

for name in NATIVE_MODULES:
    sys.modules.pop(name, None)
sys.addaudithook(guard)
sys.argv = ["<code>"]
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
del cfg, libc, ctypes

def report(exc):
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    stack = [frame for frame in shown.stack if frame.filename != "<string>"]
    shown.stack = traceback.StackSummary.from_list(stack)
    sys.stderr.write("".join(shown.format()))

try:
    exec(compile(code, "<code>", "exec"), namespace)
except MemoryError:
    sys.stderr.write("MemoryError: out of memory\n")
    sys.exit(1)
except SystemExit:
    raise
except BaseException as exc:
    report(exc)
    sys.exit(1)
'''


def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` in a fresh sandboxed interpreter; never raises for anything the code does."""
    limits = limits or SandboxLimits()
    start = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="whalekit-sandbox-")
    proc: subprocess.Popen[bytes] | None = None
    try:
        config = json.dumps({"scratch": scratch, "cpu_s": int(limits.cpu_s), "memory_mb": limits.memory_mb,
                             "file_mb": limits.file_mb, "namespaces": limits.namespaces})
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-B", "-X", "utf8", "-c", _BOOTSTRAP, config],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=scratch, env={}, start_new_session=True, close_fds=True)
        except OSError as exc:
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
        _remove_tree(scratch)


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
                break  # a leftover child holds the pipes open: it is killed with the group
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
    if exit_code < 0:
        sig = -exit_code
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
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: str) -> None:
    """Delete the scratch directory even if the code made parts of it read-only."""

    def retry(function: Any, target: str, _: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            function(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


def probe_isolation(limits: SandboxLimits | None = None) -> list[str]:
    """The isolation layers a sandboxed process gets on this machine, e.g.
    ['netns', 'pidns', 'readonly-fs', 'procfs', 'rlimits', 'nocaps', 'hooks']."""
    result = run_python("import os; print(os.environ.get('WHALEKIT_SANDBOX', ''))", limits)
    if not result.ok:
        raise RuntimeError(f"the sandbox does not run on this machine: {result.error} {result.details} {result.stderr}")
    return result.stdout.strip().split(",")

