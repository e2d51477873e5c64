"""`make lab` opens the notebooks: its recipe, run with this environment's Jupyter, serves
JupyterLab with the notebooks folder as its root."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lab_command(port: int, token: str) -> str:
    recipe = (ROOT / "Makefile").read_text().split("\nlab: install\n", 1)[1].split("\n\n", 1)[0]
    line = next(line.strip() for line in recipe.splitlines() if "jupyter lab" in line)
    bin_dir = str(Path(sys.executable).parent)
    args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
            f"--IdentityProvider.token={token} --ServerApp.port_retries=0")
    return line.replace("$(VENV)/bin", bin_dir).replace("$(LAB_ARGS)", args).replace("$$", "$")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(120)
def test_make_lab_serves_the_notebooks(tmp_path):
    if not (Path(sys.executable).parent / "jupyter-lab").exists():
        pytest.fail("jupyter-lab is not installed beside this Python: pip install -e '.[lab]'")
    port, token = _free_port(), "whalekit-test"
    command = _lab_command(port, token)
    assert re.search(r"jupyter lab --ServerApp\.root_dir=notebooks", command), command
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    log = tmp_path / "lab.log"
    with log.open("w") as handle:
        server = subprocess.Popen(command, shell=True, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents",
                                         headers={"Authorization": f"token {token}"})
        deadline, listing = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:
                    listing = json.load(reply)
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, log.read_text()[-2000:]
        names = {item["name"] for item in listing["content"]}
        assert "01_quickstart.ipynb" in names and "07_harness_archive.ipynb" in names
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/lab", headers={
                "Authorization": f"token {token}"}), timeout=10) as page:
            assert b"JupyterLab" in page.read()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
