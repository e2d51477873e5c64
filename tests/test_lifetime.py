"""A killed run leaves nothing behind (issue 52, item 3): whalekit's children die with their
parent even when it is SIGKILLed (whalekit.infra.lifetime), shared-memory files of dead processes
are swept, a notebook job's kernel leaves no process once the job is over
(whalekit.repro.notebook_runner), and a driver holding a vLLM sampler that is SIGKILLed leaves no
engine process.

The vLLM test is marked slow (an engine start takes ~20-60 s on CPU) and skips with the
reason where vllm is not importable or WHALEKIT_NO_VLLM=1 is set."""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from whalekit.infra import lifetime
from whalekit.repro.notebook_runner import execute
from whalekit.repro.reproduce_plan import Job

REPO = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, waiting to be reaped by whoever adopted it)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if not _gone(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


# -- a child started with the preexec helper ------------------------------------------------
PARENT = """
import subprocess, sys, time
from whalekit.infra.lifetime import dies_with_this_process
helper = dies_with_this_process() if sys.argv[1] == "with" else None
child = subprocess.Popen(["sleep", "300"], preexec_fn=helper)
print(child.pid, flush=True)
time.sleep(300)
"""


def _grandchild_after_parent_killed(mode: str, wait_s: float) -> tuple[int, bool]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert not _gone(grandchild)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        return grandchild, bool(_wait_gone([grandchild], timeout=wait_s))
    finally:
        parent.kill()
        parent.wait()


@linux_only
def test_a_child_started_with_the_preexec_helper_dies_when_its_parent_is_sigkilled():
    grandchild, survived = _grandchild_after_parent_killed("with", wait_s=5.0)
    assert not survived, f"the child {grandchild} outlived its SIGKILLed parent"


@linux_only
def test_without_the_helper_the_child_outlives_its_sigkilled_parent():
    """The control: what the helper prevents (an orphan that nothing ends)."""
    grandchild, survived = _grandchild_after_parent_killed("without", wait_s=2.0)
    _kill([grandchild])
    assert survived


@linux_only
def test_a_child_whose_parent_is_already_gone_exits_before_doing_anything():
    code = ("import os, sys\nfrom whalekit.infra.lifetime import die_with_parent\n"
            "die_with_parent(int(sys.argv[1]) or os.getppid())\nprint('ran')\n")
    orphaned = subprocess.run([sys.executable, "-c", code, str(_dead_pid())], cwd=REPO, capture_output=True, text=True)
    assert (orphaned.returncode, orphaned.stdout) == (lifetime.ORPHANED_EXIT_CODE, "")
    adopted = subprocess.run([sys.executable, "-c", code, "0"], cwd=REPO, capture_output=True, text=True)
    assert (adopted.returncode, adopted.stdout) == (0, "ran\n")


# -- a child run to its end (run_child) --------------------------------------------------------
# What a benchmark does with each run: `run_child(command, lock=...)` in a process that turns
# SIGTERM into SystemExit. The child notes its pid, then whether it was asked to stop.
RUNNER = """
import sys
from whalekit.infra.lifetime import run_child
from whalekit.infra.shutdown import exit_on_sigterm
exit_on_sigterm()
child = ("import os, signal, sys, time\\n"
         "note = lambda line: open(sys.argv[1], 'a').write(line + chr(10))\\n"
         "signal.signal(signal.SIGTERM, lambda *_: (note('asked to stop'), sys.exit(0)))\\n"
         "note(str(os.getpid()))\\n"
         "time.sleep(300)\\n")
sys.exit(run_child([sys.executable, "-c", child, sys.argv[1]], lock=sys.argv[2]))
"""


def _lock_is_free(lock: Path) -> bool:
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["terminated", "killed"])
def test_a_run_child_holds_the_lock_and_ends_with_its_parent(tmp_path, signum):
    notes, lock = tmp_path / "child.notes", tmp_path / "cpu.lock"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(notes), str(lock)], cwd=REPO)
    child = None
    try:
        deadline = time.monotonic() + 60
        while not (notes.exists() and notes.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(notes.read_text().split()[0])
        assert not _gone(child) and not _lock_is_free(lock), "the child runs, and the lock is held meanwhile"
        runner.send_signal(signum)
        runner.wait(timeout=60)
        assert _wait_gone([child], timeout=10.0) == [], "the child outlived its runner"
        if signum == signal.SIGTERM:
            assert runner.returncode == 128 + signal.SIGTERM
            assert notes.read_text().splitlines()[1:] == ["asked to stop"], "a terminated child may close cleanly"
        assert _lock_is_free(lock)
    finally:
        runner.kill()
        runner.wait()
        if child is not None:
            _kill([child])


def test_run_child_returns_the_childs_exit_status():
    assert lifetime.run_child([sys.executable, "-c", "raise SystemExit(3)"]) == 3


# -- the vLLM plugin --------------------------------------------------------------------------
def test_the_vllm_plugin_is_registered_as_a_general_plugin():
    """vLLM loads `vllm.general_plugins` entry points in the driver, EngineCore and workers
    (needs `pip install -e .` after an edit of pyproject.toml's entry points)."""
    plugins = importlib.metadata.entry_points(group="vllm.general_plugins")
    [plugin] = [e for e in plugins if e.name == "whalekit-lifetime"]
    assert plugin.load() is lifetime.vllm_general_plugin


def _report_parent_death_signal(out: str) -> None:
    """A multiprocessing child: runs the plugin, then reports the signal it now dies with."""
    import ctypes

    lifetime.vllm_general_plugin()
    value = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    Path(out).write_text(json.dumps(value.value))


@linux_only
@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_in_a_multiprocessing_child_the_plugin_sets_the_parent_death_signal(tmp_path, method):
    out = tmp_path / "signal.json"
    child = multiprocessing.get_context(method).Process(target=_report_parent_death_signal, args=(str(out),))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and json.loads(out.read_text()) == signal.SIGKILL


def test_in_the_driver_the_plugin_only_sweeps_shared_memory(tmp_path, monkeypatch):
    stale = tmp_path / f"whalekit-weights-{_dead_pid()}-x1y2.bin"
    stale.write_bytes(b"left by a killed run")
    monkeypatch.setattr(lifetime, "shared_file_dirs", lambda: [tmp_path])
    called = []
    monkeypatch.setattr(lifetime, "set_parent_death_signal", lambda *a: called.append(a) or True)
    lifetime.vllm_general_plugin()
    assert not stale.exists() and called == []  # the driver dies with nobody


# -- the sweep of shared memory ---------------------------------------------------------------
def test_the_sweep_removes_files_of_dead_processes_and_keeps_those_of_live_ones(tmp_path):
    dead, live = _dead_pid(), os.getpid()
    stale = tmp_path / f"whalekit-weights-{dead}-ab_c1.bin"
    stale_folder = tmp_path / f"whalekit-adapter-{dead}-q9"
    mine = tmp_path / f"whalekit-weights-{live}-de_f2.bin"
    openmp_stale = tmp_path / f"__KMP_REGISTERED_LIB_{dead}_{os.getuid()}"  # an engine's libiomp5, SIGKILLed
    openmp_mine = tmp_path / f"__KMP_REGISTERED_LIB_{live}_{os.getuid()}"
    rpc_stale = tmp_path / f"whalekit-rpc-{dead}-k_3x"  # a SIGKILLed sampler's ZMQ socket folder
    others = [tmp_path / "psm_1a2b3c", tmp_path / f"vllm_offload_{dead}.mmap", tmp_path / "whalekit-adapter-k2j3z"]
    for path in [stale, mine, openmp_stale, openmp_mine, *others]:
        path.write_bytes(b"x")
    for folder in (stale_folder, rpc_stale):
        folder.mkdir()
        (folder / "adapter_model.safetensors").write_bytes(b"x")
    assert sorted(lifetime.sweep_stale_shared_files([tmp_path])) == sorted([stale, stale_folder, openmp_stale,
                                                                            rpc_stale])
    assert mine.exists() and openmp_mine.exists()  # a live owner keeps its files
    assert all(p.exists() for p in others)  # no owner whalekit can tell: never touched


def test_an_owned_temp_folder_is_private_and_names_its_owner_for_the_sweep():
    folder = lifetime.owned_temp_folder("rpc")
    try:
        assert folder.parent == Path(tempfile.gettempdir()) and folder.parent in lifetime.shared_file_dirs()
        assert folder.name.startswith(f"whalekit-rpc-{os.getpid()}-")
        assert lifetime.owner_pid(folder.name) == os.getpid()
        assert folder.stat().st_mode & 0o777 == 0o700
        assert folder not in lifetime.sweep_stale_shared_files()  # its owner lives
    finally:
        folder.rmdir()
    with pytest.raises(ValueError, match="lower-case"):
        lifetime.owned_temp_folder("RPC-1")


@linux_only
def test_a_zombie_is_dead_to_the_sweep():
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not lifetime.pid_alive(zombie.pid)  # not reaped yet: the pid is its until wait()
    zombie.wait()
    assert lifetime.pid_alive(os.getpid())


def test_the_sweep_looks_where_the_weight_buffer_is_made():
    from whalekit.samplers.vllm_sync import shared_memory_dir

    assert shared_memory_dir() in lifetime.shared_file_dirs()


# -- notebook jobs ----------------------------------------------------------------------------
LEAKY_NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "id": "parameters", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [],
         "source": "pid_file = ''\ndie = False"},
        {"cell_type": "code", "id": "leak", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import os, signal, subprocess\n"
                   "# what a busy vLLM engine is to a kernel: a child that an interrupt does not end\n"
                   "child = subprocess.Popen(['sleep', '300'], preexec_fn=lambda: signal.signal(signal.SIGINT, "
                   "signal.SIG_IGN))\n"
                   "open(pid_file, 'w').write(str(child.pid))\n"
                   "if die:\n    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


@linux_only
@pytest.mark.timeout(300)
@pytest.mark.parametrize("die", [False, True], ids=["finished", "kernel-killed"])
def test_a_notebook_job_leaves_no_process_of_its_kernel_however_it_ended(tmp_path, die):
    (tmp_path / "leaky.ipynb").write_text(json.dumps(LEAKY_NOTEBOOK))
    pid_file = tmp_path / "child.pid"
    job = Job("leaky", {"pid_file": str(pid_file), "die": die}, tmp_path / "out" / "leaky.ipynb")
    try:
        if die:
            with pytest.raises(Exception, match="(?i)dead|died|kernel"):
                execute(job, tmp_path)
        else:
            execute(job, tmp_path)
        child = int(pid_file.read_text())
        assert _wait_gone([child], timeout=5.0) == [], "the kernel's child outlived its job"
    finally:
        if pid_file.exists():
            _kill([int(pid_file.read_text())])


# -- a driver holding a vLLM sampler, SIGKILLed ------------------------------------------------
DRIVER = """
import time
from whalekit.samplers.models import load_model, load_policy
from whalekit.samplers.base import GenerationRequest, SamplingParams

policy = load_policy("tiny-random", sampler="vllm", vllm_options={"dtype": "float32", "kv_cache_gib": 1})
policy.sampler.generate([GenerationRequest([1, 2, 3], 4)], SamplingParams(temperature=1.0))
policy.sampler.load_weights(load_model(policy.path).state_dict())  # the weight-sync buffer is mapped, then unlinked
policy.sampler.load_weights(load_model(policy.path).state_dict())  # a second sync uses the unlinked buffer
print("ready", flush=True)
time.sleep(600)
"""


def _shm_names() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def _rpc_folders(pid: int) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"whalekit-rpc-{pid}-*"))


def _temp_unix_sockets(pids: list[int]) -> set[Path]:
    """The unix sockets that `pids` have bound at a path in the temporary folder (vLLM's ZMQ
    ipc:// endpoints)."""
    temp = Path(tempfile.gettempdir())
    paths = set()
    for pid in pids:
        for connection in psutil.Process(pid).net_connections(kind="unix"):
            if connection.laddr and Path(connection.laddr).is_relative_to(temp):
                paths.add(Path(connection.laddr))
    return paths


@linux_only
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_closed_vllm_sampler_leaves_no_file_behind(require_vllm):
    """vLLM left its ZMQ socket files and its rendezvous file (vllm_dist_<uuid>) in /tmp even
    after a clean shutdown, and its killed worker's OpenMP registration file in /dev/shm: the
    engine's temporary files go in a folder of the sampler's own, which its close removes,
    and its close sweeps /dev/shm."""
    from whalekit.samplers.models import load_policy

    if os.environ.get("VLLM_RPC_BASE_PATH"):
        pytest.skip("VLLM_RPC_BASE_PATH is set here, and a user's setting wins over the sampler's own folder")
    temp, tmpdir = Path(tempfile.gettempdir()), os.environ.get("TMPDIR")
    rendezvous = set(temp.glob("vllm_dist_*"))
    sampler = load_policy("tiny-random", sampler="vllm", vllm_options={"dtype": "float32", "kv_cache_gib": 1}).sampler
    try:
        folder = sampler.rpc_folder
        assert _rpc_folders(os.getpid()) == [folder]
        assert list(folder.glob("vllm_dist_*")) and set(temp.glob("vllm_dist_*")) == rendezvous
        assert os.environ.get("TMPDIR") == tmpdir and tempfile.gettempdir() == str(temp), "this process's stays"
        children = psutil.Process().children(recursive=True)  # multiprocessing's resource tracker too
        engines = [p.pid for p in children if "VLLM::" in " ".join(p.cmdline())]  # EngineCore and its worker
        assert engines
        sockets = _temp_unix_sockets([os.getpid(), *engines])
        assert sockets and all(s.parent == folder for s in sockets), sockets
        assert os.environ.get("VLLM_RPC_BASE_PATH") is None, "the setting is the engine start's only"
        if any("libiomp5" in library for library in sampler.preloaded):
            engine_files = {n for n in _shm_names() if lifetime.owner_pid(n) in engines}
            assert engine_files, "the engine's processes registered Intel OpenMP in /dev/shm"
    finally:
        sampler.close()
    assert not folder.exists() and _rpc_folders(os.getpid()) == []
    assert set(temp.glob("vllm_dist_*")) == rendezvous
    assert _wait_gone(engines, timeout=15.0) == []
    assert {n for n in _shm_names() if lifetime.owner_pid(n) in engines} == set(), "files left in /dev/shm"


@linux_only
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sigkilled_driver_holding_a_vllm_sampler_leaves_no_process_and_no_shared_memory(tmp_path, require_vllm):
    before = _shm_names()
    log = tmp_path / "driver.log"
    with log.open("w") as err:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                                  text=True)
    descendants: list[int] = []
    try:
        assert driver.stdout is not None
        for line in driver.stdout:  # vLLM logs to stdout too
            if line.strip() == "ready":
                break
        else:
            pytest.fail("the driver exited before its sampler was ready:\n" + log.read_text()[-3000:])
        descendants = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
        engine = [p for p in descendants if "EngineCore" in " ".join(psutil.Process(p).cmdline())]
        assert engine, "the vLLM engine runs in a process of its own"
        buffers = {n for n in _shm_names() - before if n.startswith(f"whalekit-weights-{driver.pid}-")}
        assert buffers == set(), "once the engine has mapped the weight-sync buffer, its file is unlinked"
        [rpc_folder] = _rpc_folders(driver.pid)
        sockets = _temp_unix_sockets([driver.pid, *descendants])
        assert sockets and all(s.parent == rpc_folder for s in sockets), \
            f"the engine's sockets lie in the driver's own folder {rpc_folder}: {sockets}"

        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        killed_at = time.monotonic()
        assert _wait_gone(descendants, timeout=15.0) == [], "engine processes outlived the SIGKILLed driver"

        # Nothing runs in a SIGKILLed process: the weight buffer is already unlinked, and what else
        # the driver and its engine left in /dev/shm (OpenMP's few-byte registration files) is
        # removed by the sweep that the next sampler's start runs (the plugin, in the next driver).
        left_by_kill = {n for n in _shm_names() - before if n.startswith("whalekit-")}
        assert left_by_kill == set(), "no whalekit file outlives the kill, before any sweep"
        def left() -> set[str]:
            new = _shm_names() - before
            return {n for n in new if lifetime.owner_pid(n) in (None, driver.pid, *descendants)}

        lifetime.vllm_general_plugin()  # what the next driver's vLLM start runs
        while left() and time.monotonic() < killed_at + 15.0:
            time.sleep(0.2)
        assert left() == set(), "files left in /dev/shm"
        assert not rpc_folder.exists(), "the sweep removes the dead driver's socket folder, sockets and all"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        _kill(descendants)


def test_the_weight_buffer_file_goes_once_mapped_and_later_syncs_still_reach_the_mapping():
    """What the vLLM sampler does after its first sync: the engine's worker holds a mapping,
    the driver unlinks the file, and the next syncs write through the same memory."""
    import torch

    from whalekit.samplers.vllm_sync import SharedWeights

    buffer = SharedWeights.for_tensors({"w": torch.zeros(4, 3)}, torch.float32)
    buffer.write({"w": torch.ones(4, 3)})
    worker = torch.from_file(buffer.path, shared=True, size=buffer.size, dtype=torch.uint8)  # the worker's map
    buffer.unlink()
    assert not Path(buffer.path).exists()
    buffer.write({"w": torch.full((4, 3), 7.0)})
    assert worker[:48].view(torch.float32).tolist() == [7.0] * 12, "the unlinked buffer still carries each sync"
    buffer.close()  # idempotent after the unlink
