"""Untrusted harness code is validated before any budget is spent and runs in a worker
whose hangs, crashes, memory bombs, secret reads and network use end as recorded
failures, never in the driver's process."""

from __future__ import annotations

from pathlib import Path

import pytest

from whalekit.domains.toy import ToyDomain
from whalekit.episode import Finished, GenerateRequest
from whalekit.sandbox.isolation import IsolatedHarness, IsolationLimits, validate_candidate, validate_source
from whalekit.types import TaskView

H0 = ToyDomain().initial_harness_source()
TASK = TaskView("toy-1+2", "toy", {"question": "What is 1 + 2?"})
FAST = IsolationLimits(hook_timeout_s=1.0)


def _hook(body: str) -> str:
    """A harness whose system_prompt runs `body` (indented under the method)."""
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f"from whalekit.harness import Harness\n\nclass Hostile(Harness):\n    def system_prompt(self, task):\n" \
           f"{lines}\n        return 'ok'\n"


@pytest.mark.parametrize(("source", "reason"), [
    ("class H(Harness)\n    pass\n", "syntax error at line 1"),
    ("import re\nx = 1\n", "exactly one class deriving from Harness, found 0"),
    (_hook("import os\nos.system('true')"), "import of os is not allowed"),
    (_hook("from subprocess import run"), "import from 'subprocess' is not allowed"),
    (_hook("__import__('socket')"), "use of '__import__' is not allowed"),
    (_hook("eval('1')"), "use of 'eval' is not allowed"),
    (_hook("x = ().__class__"), "attribute '__class__' is not allowed"),
    (_hook("x = getattr(task, '__class__')"), "use of 'getattr' is not allowed"),
    (_hook("name = 'inputs'\nx = getattr(task, name)"), "use of 'getattr' is not allowed"),
])
def test_validation_rejects_unsafe_or_broken_sources_with_a_reason(source: str, reason: str) -> None:
    assert reason in (validate_source(source) or "")


def test_getattr_with_a_literal_public_name_is_allowed() -> None:
    assert validate_source(_hook("x = getattr(task, 'subset', 'default')")) is None


def test_the_seed_harness_passes_validation_and_a_dry_run() -> None:
    assert validate_source(H0) is None
    assert validate_candidate(H0, TASK, FAST) is None


def test_dry_run_catches_a_hook_that_raises() -> None:
    bad = _hook("return 1 / 0")
    assert validate_source(bad) is None
    assert "ZeroDivisionError" in (validate_candidate(bad, TASK, FAST) or "")


def test_isolated_episode_gives_the_same_requests_as_in_process() -> None:
    with IsolatedHarness(H0, FAST) as runtime:
        handle = runtime.new_episode(TASK)
        request = handle.begin()
        assert isinstance(request, GenerateRequest)
        assert [m.content for m in request.messages][-1] == "What is 1 + 2?"
        assert request.settings.max_new_tokens == 16 and request.settings.stop == ["\n"]
        finished = handle.after_generation(" 3", "")
        assert isinstance(finished, Finished) and finished.answer == "3" and finished.error is None
        assert {"pidns", "mntns", "netns"} <= set(runtime.protections["sandbox"].split(","))


def test_an_isolated_harness_passes_answer_choices_and_a_malformed_choice_list_is_refused() -> None:
    from whalekit.sandbox.isolation import decode_request

    chooser = H0.replace("return GenerationSettings(", "return GenerationSettings(choices=['3', '4'], ")
    assert chooser != H0
    with IsolatedHarness(chooser, FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
        assert isinstance(request, GenerateRequest) and request.settings.choices == ["3", "4"]
    settings = {"max_new_tokens": 4, "stop": [], "prefill": ""}
    for bad in ([], [""], "34", [3]):
        with pytest.raises(TypeError, match="bad generation settings"):
            decode_request({"type": "generate", "messages": [], "settings": {**settings, "choices": bad}})


def test_a_bad_message_from_a_harness_is_refused_naming_what_is_wrong() -> None:
    """The text reaches a proposer's repair turn: it must say which field is wrong and why."""
    from whalekit.sandbox.isolation import decode_request

    settings = {"max_new_tokens": 4, "stop": [], "prefill": ""}

    def refusal(message: dict) -> str:
        with pytest.raises(TypeError, match="bad message from harness") as caught:
            decode_request({"type": "generate", "messages": [message], "settings": settings})
        return str(caught.value)

    assert refusal({"role": "user/few_shot", "content": "hi"}) == (
        "bad message from harness: role 'user/few_shot' is not one of 'system', 'user', 'assistant'")
    assert refusal({"role": "user", "content": ["hi"]}) == "bad message from harness: content is of type list, not str"
    assert "role" in refusal({"content": 3}) and "content is of type int" in refusal({"content": 3})


# Run without validation: the worker itself must hold even when the static checks are bypassed.
@pytest.mark.parametrize(("body", "expected", "worker_dies"), [
    ("while True:\n    pass", "hook_timeout", False),
    ("while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
     "hook_timeout", True),  # swallows the in-worker alarm: the parent kills the worker
    ("x = 'a' * (10 ** 11)", "MemoryError", False),
    ("import os\nos.system('touch /tmp/whalekit_isolation_pwned')\nraise SystemExit(os.system('true'))",
     "SystemExit", False),  # no shell in the sandbox, and /tmp is its own
    ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)", "OSError", False),
    ("import sys\nsys.exit(3)", "SystemExit", False),
    ("import os\nos._exit(3)", "worker_crash", True),
])
def test_hostile_hooks_end_the_episode_as_a_recorded_failure(body: str, expected: str, worker_dies: bool) -> None:
    with IsolatedHarness(_hook(body), FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
        assert isinstance(request, Finished) and request.answer is None
        assert expected in (request.error or "")
        assert (runtime.failure is not None) == worker_dies
        if worker_dies:  # later episodes of the candidate end at once with the same reason
            later = runtime.new_episode(TASK).begin()
            assert isinstance(later, Finished) and later.error == runtime.failure
    assert not Path("/tmp/whalekit_isolation_pwned").exists()


def test_a_reply_flooding_the_pipe_kills_the_worker() -> None:
    with IsolatedHarness(_hook("return 'x' * (80 << 20)"), IsolationLimits(hook_timeout_s=30.0)) as runtime:
        request = runtime.new_episode(TASK).begin()
        assert isinstance(request, Finished) and "exceeded 64 MiB" in (request.error or "")
        assert runtime.failure is not None


def test_worker_sees_no_secrets_from_the_parent_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-123")
    source = _hook("import os\nreturn 'KEY=' + os.environ.get('ANTHROPIC_API_KEY', 'none') + str(len(os.environ))")
    with IsolatedHarness(source, FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
    assert isinstance(request, GenerateRequest)
    assert request.messages[0].content.startswith("KEY=none") and "sk-secret" not in request.messages[0].content


def test_raw_sockets_fail_even_past_the_patched_module() -> None:
    source = _hook("import _socket\ns = _socket.socket()\ns.settimeout(1)\ns.connect(('1.1.1.1', 80))")
    with IsolatedHarness(source, FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
    assert isinstance(request, Finished) and "OSError" in (request.error or "")


def test_a_harness_returning_wrong_types_is_an_episode_error() -> None:
    source = _hook("return 42").replace("        return 'ok'\n", "")
    with IsolatedHarness(source, FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
    assert isinstance(request, Finished) and "content is of type int, not str" in (request.error or "")


def test_isolation_none_runs_trusted_code_in_a_plain_subprocess_and_warns_loudly() -> None:
    from whalekit.run.driver import RunConfig
    from whalekit.sandbox.bwrap import isolation_mode, set_isolation_mode

    with pytest.warns(RuntimeWarning, match="WITHOUT the sandbox"):
        set_isolation_mode("none")
    try:
        with IsolatedHarness(_hook("import os\nreturn 'layers=' + os.environ.get('WHALEKIT_SANDBOX', '-')"),
                             FAST) as runtime:
            request = runtime.new_episode(TASK).begin()
        assert isinstance(request, GenerateRequest) and request.messages[0].content.startswith("layers=-")
    finally:
        set_isolation_mode("sandbox")
    assert isolation_mode() == "sandbox"
    assert RunConfig(domain="toy", method="whale", isolation="none").to_json()["isolation"] == "none"
    with pytest.raises(ValueError, match="isolation must be"):
        RunConfig(domain="toy", method="whale", isolation="off")


def test_every_allow_listed_module_imports_in_a_worker() -> None:
    """A valid candidate is never failed for its imports, wherever Python is installed (here it lives
    under /root, which the sandbox's own uid could not read on the host)."""
    from whalekit.sandbox.isolation import ALLOWED_IMPORTS

    modules = [m for m in ALLOWED_IMPORTS if m != "__future__"]
    body = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    source = _hook(body)
    with IsolatedHarness(source, FAST) as runtime:
        request = runtime.new_episode(TASK).begin()
    assert isinstance(request, GenerateRequest), request
