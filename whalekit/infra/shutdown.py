"""A terminated command shuts down like an interrupted one.

Python's default answer to SIGTERM (`kill`, `timeout`, a job scheduler, `pkill`) is to die
on the spot: no `finally`, no finalizers, no `atexit`. vLLM runs its engine in a child
process that it only stops from those hooks, so a terminated run left its engine behind,
still holding its KV cache (gigabytes) and a share of the CPU, beside the run that resumes
it. Raising SystemExit instead unwinds the command as Ctrl-C does: samplers close, a
papermill kernel is shut down, and the run directory keeps its committed work (commits are
atomic, so stopping between two of them loses nothing that was finished). SIGKILL cannot be
caught: after `kill -9` vLLM's engine process is still left over.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit(143) in the main thread (elsewhere: no effect)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def _exit(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during clean-up kills at once
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
