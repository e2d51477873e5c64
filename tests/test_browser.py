"""The notebooks in a real browser: JupyterLab on 127.0.0.1 with this environment's kernel,
driven by headless Chromium through the quickstart (the tiny random model on math) and
notebook 07 (small runs written by run_fixtures), checked from the rendered page: the
quickstart shows progress, a tool call and trained tokens; the trace viewer shows a
conversation with a tool call, a verdict and flags on first open, and the other run's
trajectory after the run menu is switched.

Needs Debian's `chromium` and `chromium-driver` and the `selenium` package (`make install`
installs them as root on Debian); skips with the reason elsewhere. WHALEKIT_SCREENSHOTS=DIR
keeps the page screenshots there."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from run_fixtures import write_run

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[lab]')"
    for binary, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(binary) is None:
            return f"{binary} not found (Debian: apt-get install {package}; `make install` does it as root)"
    if not (Path(sys.executable).parent / "jupyter-lab").exists():
        return "jupyter-lab is not installed beside this Python (pip install -e '.[lab]')"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parameterised(name: str, folder: Path, parameters: dict) -> None:
    """The notebook with papermill's injected-parameters cell, as papermill would run it."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    notebook = load_notebook_node(str(ROOT / "notebooks" / f"{name}.ipynb"))
    nbformat.write(parameterize_notebook(notebook, parameters), folder / f"{name}.ipynb")


def _lab_settings(folder: Path) -> None:
    """Every cell rendered (no windowing: the page text is complete) and no news prompt."""
    settings = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
                "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}
    for name, value in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("browser")
    runs, figures, notebooks = base / "runs", base / "figures", base / "notebooks"
    notebooks.mkdir()
    write_run(runs, "whale", [0.5, 0.75], domain="toy", task="toy-1+2")
    write_run(runs, "whale", [0.25, 0.5], domain="math", task="math-seven")
    write_run(runs, "weight_only", [0.5, 0.5], domain="toy", task="toy-1+2")
    common = {"preset": "smoke", "runs_root": str(runs), "figures": str(figures)}
    _parameterised("01_quickstart", notebooks, {**common, "domain": "math", "n_tasks": 2, "samples": 2})
    _parameterised("07_harness_archive", notebooks, common)
    _lab_settings(base / "settings")
    port, token = _free_port(), "whalekit-browser-test"
    env = {k: v for k, v in os.environ.items() if k != "WHALEKIT_HEADLESS"}  # the widgets must render
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"))
    command = [str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={notebooks}", "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = base / "lab.log"
    with log.open("w") as handle:
        server = subprocess.Popen(command, cwd=notebooks, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5):
                break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("JupyterLab did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.5)
    singletons = _singleton_folders()
    driver = _chromium()
    try:
        driver.get(f"{url}/lab?token={token}")
        _script(driver, """const wait = () => window.jupyterapp ? window.jupyterapp.restored.then(() => done(true))
                                                        : setTimeout(wait, 200);
                           wait();""", timeout=90)
        yield driver, base, log
    finally:
        driver.quit()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        for folder in _singleton_folders() - singletons:  # Chromium's, left by the quit: the test's own
            shutil.rmtree(folder, ignore_errors=True)


def _singleton_folders() -> set[Path]:
    """The folders Chromium makes in the temporary folder for its single-instance socket
    (org.chromium.Chromium.XXXXXX); a headless Chromium that chromedriver quits leaves its own."""
    return set(Path(tempfile.gettempdir()).glob("org.chromium.Chromium.*"))


def _chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1100"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _script(driver, body: str, *args, timeout: float = 30):
    """Run `body` as an async script in the page; it calls done(value)."""
    driver.set_script_timeout(timeout)
    return driver.execute_async_script("const done = arguments[arguments.length - 1];\n" + body, *args)


def _screenshot(driver, base: Path, name: str) -> None:
    folder = Path(os.environ.get("WHALEKIT_SCREENSHOTS", base / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))


STATE = """
const panel = window.jupyterapp.shell.currentWidget;
const cells = panel.content.widgets.filter(c => c.model.type === 'code');
const outputs = cells.flatMap(c => c.model.outputs.toJSON());
done({status: panel.sessionContext.session?.kernel?.status ?? 'none',
      pending: cells.filter(c => c.model.executionCount === null || c.promptNode?.textContent.includes('*')).length,
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue + '\\n'
                                                                      + (o.traceback || []).join('\\n')),
      text: panel.content.node.innerText});
"""


def _run_notebook(driver, path: str, timeout: float, watch: str | None = None) -> tuple[str, bool]:
    """Open, run all cells, wait until every code cell has run; returns the notebook's
    rendered text and whether `watch` appeared in the page while it ran."""
    _script(driver, """
        window.jupyterapp.commands.execute('docmanager:open', {path: arguments[0], factory: 'Notebook'})
          .then(panel => panel.sessionContext.ready.then(() => done(true)));""", path, timeout=90)
    _script(driver, "window.jupyterapp.commands.execute('notebook:run-all-cells'); done(true)")
    deadline, seen = time.monotonic() + timeout, False
    while True:
        state = _script(driver, STATE)
        seen = seen or bool(watch and watch in state["text"])
        assert not state["errors"], "\n".join(state["errors"])[-3000:]
        if state["pending"] == 0 and state["status"] == "idle":
            return state["text"], seen
        assert time.monotonic() < deadline, f"{path}: still running after {timeout} s:\n{state['text'][-2000:]}"
        time.sleep(0.25)


def _viewer_text(driver) -> str:
    """The viewer's rendered text, its menus' picked entries first."""
    return _script(driver, r"""
        const boxes = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .widget-vbox')]
          .filter(box => box.querySelector('select'));
        const box = boxes[boxes.length - 1];
        if (!box) { done(''); return; }
        box.scrollIntoView();
        const picked = [...box.querySelectorAll('select')].map(s => s.selectedOptions[0]?.text ?? '(nothing)');
        done(picked.join(' | ') + '\n' + box.innerText);""").replace("\xa0", " ")  # menus pad with nbsp


def test_the_quickstart_shows_progress_a_tool_call_and_trained_tokens(lab):
    driver, base, _ = lab
    text, progress_seen = _run_notebook(driver, "01_quickstart.ipynb", timeout=150, watch="quickstart episodes")
    _screenshot(driver, base, "quickstart")
    assert progress_seen, "no progress bar while the rollout cell ran"
    for expected in ("harness h0 + code_prefill", "tool calls; RSFT would train on", "tool call python",
                     "verdict:", "behaviour flags:", "trained on:", "saved "):
        assert expected in text, expected
    # special tokens as markers (whole characters: tests/test_widgets.py; a random model's bytes may be invalid)
    assert "<|im_end|>" not in text
    assert (base / "figures" / "quickstart_trace.html").stat().st_size > 0


def test_the_trace_viewer_opens_on_a_tool_call_and_follows_a_run_switch(lab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver, base, _ = lab
    text, _ = _run_notebook(driver, "07_harness_archive.ipynb", timeout=90)
    assert "toy (whale-0.5,2-s0): 3 candidates; accepted" in text  # the lineage cell says what it found
    first = _viewer_text(driver)
    _screenshot(driver, base, "viewer_first_open")
    # first open: the math WHALE run (ranked above weights-only), its accepted harness, a correct tool call
    for expected in ("math/whale-0.5,2-s0", "★ accepted", "tool call calculator", "verdict: correct",
                     "behaviour flags: answered=True", "task math-seven"):
        assert expected in first, expected
    broken = _script(driver, """
        done([...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .wk-head span')]
             .filter(s => s.getClientRects().length > 1).map(s => s.textContent));""")
    assert broken == [], f"header fields broken over lines: {broken}"
    panel = driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden)")
    run_menu = [s for s in panel.find_elements(By.CSS_SELECTOR, ".widget-dropdown select")][0]
    Select(run_menu).select_by_visible_text("toy/whale-0.5,2-s0")
    deadline, after = time.monotonic() + 20, ""
    while time.monotonic() < deadline:
        after = _viewer_text(driver)
        if "task toy-1+2" in after:
            break
        time.sleep(0.2)
    _screenshot(driver, base, "viewer_after_switch")
    assert "task toy-1+2" in after and "task math-seven" not in after, after[-1500:]
    assert "toy/whale-0.5,2-s0 ·" in after and "tool call calculator" in after and "verdict: correct" in after
