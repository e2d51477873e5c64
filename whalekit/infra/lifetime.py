"""Processes that die with the process that started them, and files in /dev/shm that do not
outlive their owner.

Why: cleanup that runs in Python (`close()`, `weakref.finalize`, atexit, whalekit.infra.shutdown's
SIGTERM handler) cannot run when the driver is killed with SIGKILL (the OOM killer, `kill -9`,
a dead notebook kernel). vLLM's EngineCore, started by multiprocessing and watching nothing,
then lives on holding its KV cache and spinning a core, and the weight-sync buffer
(`whalekit-weights-<pid>-*.bin`, hundreds of MB) stays in /dev/shm (issue 52, item 3). Only
the kernel can act on a SIGKILL, so the children ask it to: `prctl(PR_SET_PDEATHSIG, SIGKILL)`
kills a child as soon as its parent dies, by any signal. What the dead process left in
/dev/shm, or in the temporary folder (`owned_temp_folder`), is removed by the next driver
that starts a vLLM engine.

Two ways in:

    subprocess.Popen(argv, preexec_fn=dies_with_this_process())   # a child whalekit starts itself
    run_child(argv, lock="/tmp/whalekit-cpu.lock")                # the same, run to its end under a lock
    [project.entry-points."vllm.general_plugins"] whalekit-lifetime = "whalekit.infra.lifetime:vllm_general_plugin"

vLLM calls every `vllm.general_plugins` entry point in the driver (EngineArgs.__post_init__),
in EngineCore (EngineCore.__init__) and in every worker (WorkerBase.init_worker), so the plugin
reaches processes whalekit does not start itself. In a multiprocessing child it sets the parent
death signal; in the driver it sweeps stale /dev/shm files; nothing else, so it changes nothing a
run computes.

Limits: PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not only the
process, so a child must be started from a thread that lives as long as the child is needed
(the main thread, as whalekit does for its samplers). It is Linux only; elsewhere these
functions do nothing. A child forked (not spawned) from a driver that had already loaded
vLLM's plugins does not load them again, so it gets no death signal from the plugin (vLLM on
CPU always spawns; on GPU it spawns once CUDA is initialised).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import logging
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What a child that finds its parent already gone exits with (it never starts its work).
ORPHANED_EXIT_CODE = 1
# Files in shared memory that name the process they belong to, and are garbage once it is dead:
# whalekit's own, `whalekit-<kind>-<pid>-<anything>` (whalekit.samplers.vllm_sync:
# whalekit-weights-<pid>-*.bin, 270-540 MB each), and Intel OpenMP's registration file
# `__KMP_REGISTERED_LIB_<pid>_<uid>` (1 KB), which every engine process that loads libiomp5 makes
# (whalekit preloads it: VLLMSampler's cpu_setup) and removes only at a normal exit. libiomp5 reads
# no other pid's file, and treats one whose process is gone as stale itself.
STALE_NAMES = (re.compile(r"whalekit-[a-z][a-z_]*(?:-[a-z][a-z_]*)*-(\d+)-"),
               re.compile(r"__KMP_REGISTERED_LIB_(\d+)_\d+$"))


@functools.lru_cache(maxsize=1)
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None off Linux (or where libc cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    prctl: Callable[..., int] = libc.prctl
    return prctl


def set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies; True where that
    is set (Linux), False where it cannot be (elsewhere: nothing happens). SIGKILL by default:
    the child is killed whatever state it is in, as its parent was."""
    prctl = _prctl()
    if prctl is None:
        return False
    if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


def die_with_parent(parent_pid: int) -> None:
    """In a child of `parent_pid`: be killed (SIGKILL) when that parent dies, and exit now if it
    has died already. The order matters: the parent may die between the fork and the prctl,
    and then the signal never comes, so after setting it the child checks that its parent is
    still `parent_pid` (an orphan has been handed to init or a subreaper)."""
    if set_parent_death_signal() and os.getppid() != parent_pid:
        os._exit(ORPHANED_EXIT_CODE)


def dies_with_this_process() -> Callable[[], None]:
    """A `preexec_fn` for `subprocess.Popen`: the child is SIGKILLed when the calling process
    dies. Call it in the parent (it records the parent's pid, and loads libc before the fork
    so the child does no dynamic loading between fork and exec); the death signal survives
    the child's exec (except into a set-user-ID program). Start the child from a thread that
    outlives it: see the module's note on threads."""
    _prctl()
    return functools.partial(die_with_parent, os.getpid())


def run_child(command: Sequence[str], *, lock: str | Path | None = None, grace_s: float = 120.0) -> int:
    """Run `command` to its end and return its exit status, as a child that ends with this
    process: when this process is interrupted (Ctrl-C, or SIGTERM made SystemExit by
    whalekit.infra.shutdown.exit_on_sigterm) the child gets SIGTERM and `grace_s` seconds to close
    its own engines and servers before SIGKILL; when this process is SIGKILLed the kernel
    kills the child (`dies_with_this_process`). `lock`: a flock(2) file held while the child
    runs, the same lock `flock FILE command` takes, so other CPU jobs wait their turn. Why
    not `flock FILE command` as the child: stopping the caller then stops only flock(1), and
    the command it forked runs on, orphaned."""
    with contextlib.ExitStack() as stack:
        if lock is not None:
            handle = stack.enter_context(open(lock, "a"))  # not inherited: the lock is the caller's
            fcntl.flock(handle, fcntl.LOCK_EX)
        child = subprocess.Popen(list(command), preexec_fn=dies_with_this_process())
        try:
            return child.wait()
        except BaseException:
            child.terminate()
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise


def vllm_general_plugin() -> None:
    """vLLM's `vllm.general_plugins` entry point (pyproject.toml), run once in each vLLM process.

    In a multiprocessing child (EngineCore, and each worker where the executor starts worker
    processes): the parent death signal, so it dies with the process that spawned it; an
    EngineCore watches nothing otherwise, and no Python cleanup runs when its driver is
    SIGKILLed. If the parent is already gone it exits at once. In the driver: the sweep of
    /dev/shm files left by dead whalekit processes (`sweep_stale_shared_files`), which is what a
    sampler's start does. It never raises: vLLM does not catch a plugin's error, and a failed
    sweep must not stop an engine from starting."""
    try:
        parent = multiprocessing.parent_process()
        if parent is not None:
            if set_parent_death_signal() and os.getppid() != parent.pid and not parent.is_alive():
                # (a forkserver child's parent by pid is the server, hence the sentinel check)
                os._exit(ORPHANED_EXIT_CODE)
            return
        sweep_stale_shared_files()
    except Exception:  # logged: an engine start must not fail on this
        logger.warning("whalekit's vLLM lifetime plugin failed", exc_info=True)


def shared_file_dirs() -> list[Path]:
    """Where whalekit's shared-memory files may be: /dev/shm, or the temporary folder where
    /dev/shm is missing or read-only (whalekit.samplers.vllm_sync.shared_memory_dir)."""
    dirs = [Path("/dev/shm"), Path(tempfile.gettempdir())]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def owner_pid(name: str) -> int | None:
    """The pid a shared-memory file of STALE_NAMES belongs to; None for any other name."""
    for pattern in STALE_NAMES:
        match = pattern.match(name)
        if match is not None:
            return int(match.group(1))
    return None


def sweep_stale_shared_files(dirs: Iterable[Path] | None = None) -> list[Path]:
    """Remove every file or folder of STALE_NAMES in `dirs` (default: `shared_file_dirs()`)
    whose pid is no live process and that belongs to this user; returns what was removed.
    A live pid keeps its files (it may be a reused pid: then they wait for the next sweep
    after it dies). Other files are never touched, whoever made them: vLLM's shared-memory
    queues (`psm_*`, multiprocessing's random names) name no owner. Not protected: a process
    in another pid namespace that shares this /dev/shm (a container with the host's IPC
    namespace) looks dead from here; only the same user's files are touched, so that needs
    the same uid as well."""
    removed: list[Path] = []
    uid = os.getuid()
    for folder in shared_file_dirs() if dirs is None else dirs:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            pid = owner_pid(entry.name)
            if pid is None or pid_alive(pid):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
            except FileNotFoundError:
                continue  # another sweep got there first
            except OSError as exc:
                logger.warning("could not remove stale %s: %s", entry.path, exc)
                continue
            removed.append(Path(entry.path))
    if removed:
        logger.warning("removed %d file(s) left in shared memory by dead processes: %s", len(removed),
                       ", ".join(p.name for p in removed))
    return removed


def owned_temp_folder(kind: str) -> Path:
    """A new private folder `whalekit-<kind>-<pid>-<random>` in the temporary folder, for
    files another program makes on this process's behalf and never removes when it is
    killed (vLLM's ZMQ sockets: whalekit.samplers.vllm). Its owner removes it when done;
    if the owner dies first, its name is one of STALE_NAMES, so the next sweep removes it."""
    if not re.fullmatch(r"[a-z][a-z_]*", kind):
        raise ValueError(f"kind {kind!r}: lower-case letters and '_' only, or the sweep would not know the folder")
    return Path(tempfile.mkdtemp(prefix=f"whalekit-{kind}-{os.getpid()}-"))


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process, of any user. A zombie is dead: it has released
    everything but its pid, which no other process can take until it is reaped (a killed
    engine stays one until whoever adopted it reaps it)."""
    if pid <= 0:
        return True  # not a process id: never treat it as dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux), or it is gone now: the next sweep decides
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])
