"""Attacks on the boundary, one per class, each judged by its effect: a planted secret file
outside the project, the driver's environment, the test split, a listening socket on the
host, the driver, a sibling worker and a bystander process. Every attack must be refused
or run and leak nothing, with every one of those still alive.

The harness-worker attacks bypass `validate_source` on purpose (they start IsolatedHarness
directly): the operating-system boundary must hold on its own. The same file runs as root
and, through `test_the_catalogue_holds_as_an_unprivileged_user`, as a normal user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from whalekit.episode import Finished, GenerateRequest
from whalekit.sandbox.bwrap import sandbox_available
from whalekit.sandbox.isolation import IsolatedHarness, IsolationLimits
from whalekit.sandbox.python_tool import SandboxLimits, run_python

AVAILABLE, WHY = sandbox_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"no sandbox on this machine: {WHY}")
ROOT = Path(__file__).resolve().parents[1]
LIMITS = IsolationLimits(hook_timeout_s=5.0)
TOOL = SandboxLimits(wall_s=20, cpu_s=5, memory_mb=512, output_bytes=8000)
HOST_ONLY = {"work", "home", "srv", "var", "mnt", "media", "boot", "run", "sys", "etc-passwd"}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The things an attack would want: a secret file, a secret in the environment, a
    listening socket, a bystander process; and the words that must never come back."""
    secret = f"SECRET-{uuid.uuid4().hex}"
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "answers.txt").write_text(secret)
    os.chmod(tmp_path, 0o755)
    os.chmod(vault, 0o755)
    os.chmod(vault / "answers.txt", 0o644)
    env_secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", env_secret)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    bystander = subprocess.Popen(["sleep", "120"])
    yield {"secret": secret, "file": str(vault / "answers.txt"), "dir": str(vault), "env": env_secret,
           "port": server.getsockname()[1], "accepted": accepted, "bystander": bystander, "driver": os.getpid(),
           "project": str(ROOT)}
    stop.set()
    thread.join(timeout=2)
    server.close()
    alive = bystander.poll() is None
    bystander.kill()
    bystander.wait()
    assert alive, "an attack killed a process outside its sandbox"
    assert not accepted, "an attack reached a socket on the host"


def _harness(body: str, world: dict, prelude: str = "") -> str:
    """A harness whose system_prompt runs `body` and returns what it found as the prompt."""
    code = body.format(**{k: v for k, v in world.items() if isinstance(v, (str, int))})
    lines = "\n".join("        " + line for line in code.strip().splitlines())
    return (f"from whalekit.harness import Harness\n{prelude}\n\nclass Attack(Harness):\n"
            f"    def system_prompt(self, task):\n        found = ''\n{lines}\n        return 'found:' + str(found)\n")


WORKER_ATTACKS = {
    "plain_open": "found = open({file!r}).read()",
    "re_exported_builtins": "import typing\nfound = typing.sys.modules['builtins'].open({file!r}).read()",
    "sys_modules": "import sys\nfound = sys.modules['builtins'].open({file!r}).read()",
    "traceback_frames": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                        "    found = e.__traceback__.tb_frame.f_builtins['open']({file!r}).read()",
    "generator_frames": "g = (x for x in [1])\nfound = g.gi_frame.f_builtins['open']({file!r}).read()",
    "coroutine_frames": "async def c():\n    pass\nco = c()\nfound = co.cr_frame.f_builtins['open']({file!r}).read()",
    "gc_objects": "import gc\nopeners = [o['open'] for o in gc.get_objects() if isinstance(o, dict) and 'open' in o]\n"
                  "found = openers[0]({file!r}).read()",
    "import_machinery": "import importlib\nfound = importlib.import_module('io').open({file!r}).read()",
    "python_chess_submodules": "import chess.engine\nfound = chess.engine.__file__",
    "whalekit_package": "import whalekit.harness\nfound = whalekit.get_domain('chess')",
    "rebuild_the_test_split": "from whalekit.domains.chess import ChessDomain\nfound = ChessDomain().load_splits()",
    "read_project_data": "import os\nfound = [open(os.path.join(r, f)).read() for r, _, fs in os.walk({project!r}) "
                         "for f in fs][:3]",
    "list_host_folders": "import os\nfound = sorted(os.listdir('/'))",
    "start_a_process": "import subprocess\nfound = subprocess.run(['cat', {file!r}], capture_output=True).stdout",
    "fork": "import os\npid = os.fork()\nfound = pid",
    "signal_the_driver": "import os\nos.kill({driver}, 9)",
    "signal_everything": "import os\nos.kill(-1, 9)",
    "low_level_socket": "import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))",
    "driver_environment": "import os\nfound = dict(os.environ)\nfound = str(found) + open('/proc/1/environ').read()",
    "driver_proc_entry": "found = open('/proc/{driver}/environ').read()",
    "proc_self_root": "found = open('/proc/self/root' + {file!r}).read()",
}


@pytest.mark.parametrize("attack", sorted(WORKER_ATTACKS))
def test_a_hostile_harness_leaks_nothing_and_harms_no_one(attack: str, world: dict) -> None:
    from whalekit.types import TaskView

    task = TaskView("t-1", "toy", {"question": "What is 1 + 2?"})
    benign = "from whalekit.harness import Harness\n\nclass Benign(Harness):\n    pass\n"
    with IsolatedHarness(benign, LIMITS) as sibling, IsolatedHarness(_harness(WORKER_ATTACKS[attack], world),
                                                                       LIMITS) as hostile:
        assert isinstance(sibling.new_episode(task).begin(), GenerateRequest)  # the sibling is up
        request = hostile.new_episode(task).begin()
        seen = repr(request)
        for word in (world["secret"], world["env"]):
            assert word not in seen, f"{attack} leaked {word[:12]}..."
        if attack == "list_host_folders":
            assert isinstance(request, GenerateRequest), request
            listing = request.messages[0].content
            assert not any(f"'{name}'" in listing for name in HOST_ONLY), listing
            assert "answers.txt" not in listing
        if attack == "rebuild_the_test_split":
            assert isinstance(request, Finished) and "No module named 'whalekit.domains'" in (request.error or "")
        if attack == "whalekit_package":
            assert isinstance(request, Finished) and "get_domain" in (request.error or "")
        if attack == "python_chess_submodules":
            assert isinstance(request, Finished) and "No module named 'chess'" in (request.error or "")
        again = sibling.new_episode(task).begin()
        assert isinstance(again, GenerateRequest), "the sibling worker died"
        assert sibling.failure is None


def test_state_does_not_carry_from_one_episode_to_the_next(world: dict) -> None:
    from whalekit.types import TaskView

    source = ("from whalekit.harness import Harness\nSEEN = []\n\nclass Memory(Harness):\n    notes = []\n"
              "    def system_prompt(self, task):\n        SEEN.append(task.id)\n        self.notes.append(task.id)\n"
              "        return f'{len(SEEN)} {len(self.notes)}'\n")
    with IsolatedHarness(source, LIMITS) as runtime:
        prompts = [runtime.new_episode(TaskView(f"t-{i}", "toy", {"question": "?"})).begin() for i in range(3)]
    assert [p.messages[0].content for p in prompts if isinstance(p, GenerateRequest)] == ["1 1"] * 3


def test_the_accepted_harness_worker_is_respawned_after_it_dies(world: dict) -> None:
    from whalekit.types import TaskView

    source = _harness("import os\nif task.id == 'crash':\n    os._exit(9)", world)
    with IsolatedHarness(source, LIMITS, respawn=True) as runtime:
        dead = runtime.new_episode(TaskView("crash", "toy", {"question": "?"})).begin()
        assert isinstance(dead, Finished) and "worker_crash" in (dead.error or "")
        after = runtime.new_episode(TaskView("fine", "toy", {"question": "?"})).begin()
        assert isinstance(after, GenerateRequest) and runtime.deaths == 1


TOOL_ATTACKS = {
    "plain_read": "print(open({file!r}).read())",
    "dir_fd": "import os\nd = os.open({dir!r}, os.O_RDONLY)\nprint(os.read(os.open('answers.txt', os.O_RDONLY, "
              "dir_fd=d), 100))",
    "proc_self_root": "print(open('/proc/self/root' + {file!r}).read())",
    "proc_parent_root": "print(open('/proc/{driver}/root' + {file!r}).read())",
    "symlink": "import os\nos.symlink({file!r}, '/tmp/link')\nprint(open('/tmp/link').read())",
    "list_host_folders": "import os\nprint(sorted(os.listdir('/')))",
    "switch_off_the_guard": "import sys\nm = sys.modules['__main__']\nfor k in list(vars(m)):\n    pass\n"
                            "print(open({file!r}).read())",
    "driver_environment": "print(open('/proc/{driver}/environ').read())",
    "socket": "import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')",
    "signal_the_driver": "import os\nos.kill({driver}, 9)\nprint('sent')",
}


@pytest.mark.parametrize("attack", sorted(TOOL_ATTACKS))
def test_hostile_model_code_leaks_nothing(attack: str, world: dict) -> None:
    code = TOOL_ATTACKS[attack].format(**{k: v for k, v in world.items() if isinstance(v, (str, int))})
    result = run_python(code, TOOL)
    text = result.stdout + result.stderr
    assert world["secret"] not in text and world["env"] not in text
    assert "connected" not in text and "sent" not in result.stdout
    if attack == "list_host_folders":
        assert result.ok and not any(f"'{name}'" in result.stdout for name in HOST_ONLY), result.stdout


def test_model_code_cannot_exceed_its_process_count(world: dict) -> None:
    code = ("import os, time\nmade = 0\ntry:\n    for _ in range(64):\n        if os.fork() == 0:\n"
            "            time.sleep(3)\n            os._exit(0)\n        made += 1\nexcept OSError:\n    pass\n"
            "print(made)")
    result = run_python(code, SandboxLimits(wall_s=20, cpu_s=5, nproc=6))
    assert result.ok, result.stderr
    assert int(result.stdout.strip()) < 6  # the sandbox's own interpreter counts as one


def _readable_for_everyone(paths: list[str], scratch: Path) -> str:
    """Shell lines (run in a private mount namespace) that make `paths` reachable for an
    unprivileged user where an ancestor is closed to others (e.g. Python under /root), by
    mounting a 0755 tmpfs over that ancestor with only the needed children bound back in.
    The stash folders that hold the children meanwhile are made under `scratch`."""
    needed: dict[Path, set[str]] = {}
    for path in paths:
        parts = Path(path).resolve().parts
        for depth in range(1, len(parts) - 1):
            ancestor = Path(*parts[:depth + 1])
            if not os.stat(ancestor).st_mode & 0o001:
                needed.setdefault(ancestor, set()).add(parts[depth + 1])
                break
    lines = []
    for number, (ancestor, children) in enumerate(needed.items()):
        stashes = {child: scratch / f"stash-{number}-{index}" for index, child in enumerate(sorted(children))}
        for child, stash in stashes.items():
            lines += [f"mkdir -p {stash}", f"mount --bind {ancestor / child} {stash}"]
        lines.append(f"mount -t tmpfs -o mode=0755 whalekit {ancestor}")
        for child, stash in stashes.items():
            lines += [f"mkdir -p {ancestor / child}", f"mount --bind {stash} {ancestor / child}"]
    return "\n".join(lines)


@pytest.mark.slow
def test_the_catalogue_holds_as_an_unprivileged_user(tmp_path: Path) -> None:
    if os.environ.get("WHALEKIT_HOSTILE_UNPRIVILEGED"):
        pytest.skip("this is the unprivileged run itself")
    if os.geteuid() != 0:
        pytest.skip("the suite already runs as a normal user: the catalogue above ran as one")
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("util-linux's unshare and setpriv are needed to drop to a normal user")
    base = os.path.realpath(sys.base_prefix)
    # pytest's own tmp_path sits in a folder only root may enter, so the unprivileged run's
    # temporary files, and the mount stashes, go in a folder of their own, removed afterwards.
    scratch = Path(tempfile.mkdtemp(prefix="whalekit-hostile-"))
    os.chmod(scratch, 0o755)
    user_tmp = scratch / "user"
    user_tmp.mkdir()
    os.chown(user_tmp, 65534, 65534)
    script = tmp_path / "as_user.sh"
    script.write_text("set -e\nmount --make-rprivate /\n" +
                      _readable_for_everyone([base, str(ROOT), sys.prefix], scratch) +
                      f"\ncd {ROOT}\nexec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "
                      f"env -i HOME=/tmp PATH=/usr/bin:/bin WHALEKIT_HOSTILE_UNPRIVILEGED=1 "
                      f"PYTHONDONTWRITEBYTECODE=1 {sys.executable} -m pytest -q -p no:cacheprovider "
                      f"-o cache_dir={user_tmp}/nocache --basetemp={user_tmp}/pytest "
                      f"tests/test_hostile.py tests/test_sandbox.py tests/test_isolation.py\n")
    try:
        run = subprocess.run(["unshare", "--mount", "sh", str(script)], capture_output=True, text=True, timeout=900)
    finally:
        # The binds lived in the child's mount namespace, so here the stashes are empty folders;
        # a stash that is a mount point here would hold the real tree, and must not be removed.
        assert not any(os.path.ismount(stash) for stash in scratch.iterdir()), f"{scratch} holds a mount"
        shutil.rmtree(scratch)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    assert " passed" in run.stdout and " skipped" not in run.stdout.split("\n")[-2].replace("1 skipped", ""), tail
