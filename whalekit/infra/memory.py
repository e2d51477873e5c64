"""The driver's memory: give freed heap back to the operating system, and read how much
anonymous memory the process holds.

Why: the trainer's activations are tensors of 1-30 MB. Once glibc has raised its dynamic
mmap threshold they come from the heap, and the holes they leave are kept by the process:
after one forward + backward of a SmolLM2-shaped model RssAnon stayed at 85 % of its peak,
and each new largest micro-batch raised a floor that never dropped. `malloc_trim(0)` hands
the free pages back. The driver calls `release_freed_memory()` after every RSFT update and
every test evaluation; it changes no number a run computes.

    release_freed_memory()   # True where glibc trimmed (Linux), False elsewhere (a no-op)
    rss_anon_mib()           # 1663.2: this process's anonymous resident memory, MiB (None off Linux)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import sys
from collections.abc import Callable
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library is not glibc (macOS, musl, Windows)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc `malloc_trim(0)`). Live
    memory is untouched: only what Python and torch have already freed goes. True where it
    ran, False where it is not available (a no-op)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def proc_status_mib(field: str, pid: int | str = "self") -> float | None:
    """A memory line of /proc/<pid>/status ("RssAnon", "VmHWM", "VmRSS", ...) in MiB; None
    where there is no such file or line (not Linux, a process that ended)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # the kernel writes kB
    return None


def rss_anon_mib(pid: int | str = "self") -> float | None:
    """Anonymous resident memory (RssAnon: heap, tensors, stacks; not mapped files) in MiB:
    what the OOM killer counts against a process and what `malloc_trim` gives back."""
    return proc_status_mib("RssAnon", pid)
