"""A terminated whalekit command shuts down as an interrupted one does: its clean-up runs,
and a vLLM sampler's engine process goes with it instead of being left behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_sigterm_unwinds_the_command_so_its_clean_up_runs(tmp_path):
    marker = tmp_path / "cleaned-up"
    script = (
        "import atexit, os, signal, time\n"
        "from whalekit.infra.shutdown import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('closed'))\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "finally:\n"
        f"    open({str(marker)!r} + '.finally', 'w').write('ran')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=60, capture_output=True, text=True)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert marker.read_text() == "closed" and Path(f"{marker}.finally").read_text() == "ran"
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_terminated_eval_on_vllm_leaves_no_engine_process_behind(tmp_path, require_vllm):
    import psutil

    log = tmp_path / "eval.log"
    command = [str(Path(sys.executable).parent / "whalekit"), "eval", "--domain", "toy",
               "--harness", "whalekit/domains/toy/harnesses/h0.py", "--preset", "smoke", "--samples", "4096",
               "--set", "sampler=vllm", "--set", "vllm_options={dtype: float32}", "--runs-root", str(tmp_path)]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline, engine = time.monotonic() + 300, []
        while not engine and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-2000:]
            time.sleep(0.5)
            engine = [p for p in psutil.Process(process.pid).children(recursive=True)
                      if "EngineCore" in " ".join(p.cmdline() or [p.name()])]
        assert engine, "the vLLM engine process should be running while the eval samples"
        time.sleep(20)  # the engine is up and sampling (8 problems x 4096 samples take minutes)
        assert process.poll() is None, log.read_text()[-2000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 128 + signal.SIGTERM
        gone, alive = psutil.wait_procs(engine, timeout=60)
        assert not alive, f"engine processes left behind: {[p.pid for p in alive]}"
    finally:
        if process.poll() is None:
            process.kill()
