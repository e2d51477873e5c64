"""The proposer's llama.cpp server (whalekit/search/proposers/local_server.py): port choice and its
refusal, a failed or slow start reported with the server's log and never left running, the
server dying with its driver on SIGKILL, and (slow) the real server on the real model
answering one chat request through the `openai` SDK and leaving no process behind.

The fast tests stand a small Python HTTP server (or a process that never listens) in for
llama-cpp-python's, through `ServerProcess`, which takes any command line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from whalekit.search.proposers import local_server as ps
from whalekit.search.proposers.local_models import (
    ProposerModelError,
    part_files,
    proposer_model_path,
    proposer_model_spec,
)


def gone(pid: int) -> bool:
    """True when `pid` is no process, or only a zombie nobody here will reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def http_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", ps.HOST]


def test_a_taken_port_is_refused_up_front_with_its_number(monkeypatch, tmp_path):
    with socket.socket() as taken:
        taken.bind((ps.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ps.ProposerServerError, match=rf"port {port} on 127\.0\.0\.1 is already in use"):
            ps.check_port_free(port)
        monkeypatch.setattr(ps, "llama_cpp_available", lambda: True)
        model = tmp_path / "m.gguf"
        model.write_bytes(b"GGUF")
        with pytest.raises(ps.ProposerServerError, match=rf"port {port} .* already in use.*ServerOptions\.port"):
            ps.start_llama_server(model, tmp_path, ps.ServerOptions(port=port))
    assert not (tmp_path / ps.LOG_NAME).exists()  # nothing was started


def test_free_ports_are_free_and_on_loopback():
    port = ps.free_port()
    ps.check_port_free(port)  # nothing listens there
    assert 0 < port < 65536


def test_a_server_that_exits_at_start_is_reported_with_its_code_and_log(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('error: model file is corrupt', flush=True); sys.exit(3)"]
    log = tmp_path / "run" / ps.LOG_NAME
    with pytest.raises(ps.ProposerServerError) as info:
        ps.ServerProcess(argv, port=ps.free_port(), log_path=log, startup_timeout_s=30)
    message = str(info.value)
    assert "exited with code 3 before answering http://127.0.0.1:" in message
    assert f"Last lines of {log}:" in message and "error: model file is corrupt" in message
    text = log.read_text()
    assert "start: " in text and "stopped: exit 3" in text  # the log records the start and the end


def test_a_server_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    pid_file = tmp_path / "pid"
    argv = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                                  "print('loading...', flush=True); time.sleep(600)"]
    start = time.monotonic()
    says = r"(?s)did not answer http://127\.0\.0\.1:\d+/v1/models within 1\.5 s; it was stopped.*timeout_s.*loading"
    with pytest.raises(ps.ProposerServerError, match=says):
        ps.ServerProcess(argv, port=ps.free_port(), log_path=tmp_path / ps.LOG_NAME, startup_timeout_s=1.5)
    assert time.monotonic() - start < 15
    assert wait_gone(int(pid_file.read_text()), 5), "the server that timed out is still running"


def test_a_missing_executable_is_named(tmp_path):
    with pytest.raises(ps.ProposerServerError, match=r"could not start /nonexistent/llama-server"):
        ps.ServerProcess(["/nonexistent/llama-server"], port=ps.free_port(), log_path=tmp_path / ps.LOG_NAME,
                         startup_timeout_s=5)


def test_a_healthy_server_is_reachable_measured_and_closed(tmp_path):
    port = ps.free_port()
    with ps.ServerProcess(http_server_argv(port), port=port, log_path=tmp_path / ps.LOG_NAME, startup_timeout_s=30,
                          health_path="/") as server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1" and server.startup_s is not None
        assert ps.healthy(f"http://127.0.0.1:{port}/")
        memory = server.memory()
        assert memory["rss"] > 0 and memory["peak"] >= memory["rss"] and memory["anon"] > 0
        pid = server.pid
    assert wait_gone(pid, 1)  # close() waited for it
    assert server.close() is not None  # idempotent
    assert not ps.healthy(f"http://127.0.0.1:{port}/")


def test_close_kills_a_server_that_ignores_sigterm(tmp_path):
    port = ps.free_port()
    code = textwrap.dedent(f"""
        import signal, http.server
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        http.server.HTTPServer(({ps.HOST!r}, {port}), http.server.SimpleHTTPRequestHandler).serve_forever()
    """)
    server = ps.ServerProcess([sys.executable, "-c", code], port=port, log_path=tmp_path / ps.LOG_NAME,
                              startup_timeout_s=30, health_path="/")
    start = time.monotonic()
    assert server.close(grace_s=0.5) == -signal.SIGKILL
    assert time.monotonic() - start < 5 and gone(server.pid)


def test_the_server_dies_with_its_driver_even_on_sigkill(tmp_path):
    """The driver is SIGKILLed, so no Python cleanup runs: the kernel's parent-death signal,
    set in the server before it execs, is what ends the server."""
    driver = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from whalekit.search.proposers import local_server as ps
        port = ps.free_port()
        server = ps.ServerProcess([sys.executable, "-m", "http.server", str(port), "--bind", ps.HOST], port=port,
                                  log_path=Path({str(tmp_path)!r}) / ps.LOG_NAME, startup_timeout_s=30,
                                  health_path="/")
        print(server.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(proc.stdout.readline())  # type: ignore[union-attr]
        assert not gone(server_pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert wait_gone(server_pid, 10), "the server outlived its SIGKILLed driver"
    finally:
        proc.kill()
        proc.wait()


def test_the_llama_command_line_keeps_the_server_local_and_lean(tmp_path):
    argv = ps.llama_server_argv(tmp_path / "m.gguf", 4321, ps.ServerOptions(n_ctx=4096, n_threads=2))
    joined = " ".join(argv)
    assert argv[:3] == [sys.executable, "-m", "llama_cpp.server"]
    assert "--host 127.0.0.1 --port 4321" in joined and "--n_ctx 4096" in joined
    assert "--n_threads 2 --n_threads_batch 2" in joined and "--logits_all false" in joined
    assert "--cache" not in argv  # the RAM prompt cache is off by default; prefix reuse is llama.cpp's own
    cached = ps.llama_server_argv(tmp_path / "m.gguf", 4321, ps.ServerOptions(prompt_cache_bytes=1 << 30))
    assert "--cache true --cache_type ram --cache_size 1073741824" in " ".join(cached)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("n_ctx", 10, "n_ctx must be at least 256"), ("n_threads", 0, "n_threads must be positive"),
    ("port", 70000, "port must be in 1..65535"), ("startup_timeout_s", 0, "startup_timeout_s must be positive"),
    ("prompt_cache_bytes", -1, "prompt_cache_bytes must be >= 0"),
])
def test_options_are_checked(field, value, says):
    with pytest.raises(ValueError, match=says):
        ps.ServerOptions(**{field: value})


def test_a_missing_model_file_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(ps, "llama_cpp_available", lambda: True)
    with pytest.raises(ps.ProposerServerError, match=r"model file .*nothing\.gguf does not exist"):
        ps.start_llama_server(tmp_path / "nothing.gguf", tmp_path)


def llama_server_pids() -> list[int]:
    """Every llama-cpp-python server process on the machine."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"llama_cpp.server" in cmdline and not gone(int(entry.name)):
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_the_real_server_answers_a_chat_request_and_leaves_nothing_behind(tmp_path):
    if not ps.llama_cpp_available():
        pytest.skip("llama-cpp-python[server] is not installed (the local-proposer extra; make install adds it "
                    "on x86-64 Linux)")
    spec = proposer_model_spec("qwen2.5-coder-1.5b")
    try:
        part_files(spec)
    except ProposerModelError as exc:
        pytest.skip(f"the proposer model's wheels are not installed: {str(exc)[:160]}")
    import openai

    before = set(llama_server_pids())
    options = ps.ServerOptions(n_ctx=2048, model_alias="coder")
    with ps.start_llama_server(proposer_model_path(spec), tmp_path, options) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=600)
        reply = client.chat.completions.create(
            model="coder", max_tokens=48, temperature=0.0,
            messages=[{"role": "user", "content": "Write a Python function add(a, b) that returns a + b."}])
        text = reply.choices[0].message.content or ""
        pid = server.pid
        assert server.pid in llama_server_pids()
    assert "def add" in text, text
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert wait_gone(pid, 5)
    assert set(llama_server_pids()) <= before, "a llama.cpp server is still running"
    assert "POST /v1/chat/completions HTTP/1.1\" 200" in (tmp_path / ps.LOG_NAME).read_text()
