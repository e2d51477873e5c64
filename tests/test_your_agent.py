"""docs/your-agent.md works as written: every block of it runs, in order, in an empty folder (a
file block is saved under its name first), with the tiny random model and local stand-ins for
the Anthropic and OpenAI APIs at the network boundary, the real SDKs in between."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fakes.anthropic_server import FakeAnthropicServer
from fakes.openai_server import FakeOpenAIServer
from fakes.recorded import load_recording

from whalekit.domains.base import get_domain
from whalekit.episode import harness_id

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "your-agent.md").read_text(encoding="utf-8")


def blocks() -> list[tuple[str, str, str | None]]:
    """(language, text, file name or None) of every fenced block, in page order."""
    pattern = r"(?:<!-- file: (\S+) -->\n)?```(\w+)\n(.*?)```"
    return [(language, text, name or None) for name, language, text in re.findall(pattern, PAGE, flags=re.S)]


def test_the_page_s_blocks_cover_each_part_it_promises():
    text = " ".join(b for _, b, _ in blocks())
    for promise in ("SimpleDomain", "initial_harness=my_h0.py", "resolve_model_dir", "proposer=anthropic",
                    "proposer=openai", "max_cost_usd", "whalekit cost"):
        assert promise in text, promise


def test_every_block_of_the_page_runs_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seed = harness_id(get_domain("toy").initial_harness_source())  # the smoke toy run's h0
    recording = load_recording("proposer_session")
    namespace: dict[str, object] = {}
    with FakeAnthropicServer(recording, {"seed_id": seed}) as claude, \
            FakeOpenAIServer(recording, {"seed_id": seed}) as local:
        env = dict(os.environ, WHALEKIT_QUIET="1", ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=claude.url,
                   OPENAI_API_KEY="EMPTY", OPENAI_BASE_URL=local.url + "/v1",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        for language, text, name in blocks():
            if name is not None:
                (tmp_path / name).write_text(text, encoding="utf-8")
            elif language == "python":
                exec(compile(text, "docs/your-agent.md", "exec"), namespace)  # noqa: S102 - the page's own code
            elif language == "bash":
                done = subprocess.run(["bash", "-e", "-c", text], cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=600)
                assert done.returncode == 0, f"{text}\n{done.stderr[-3000:]}"
        assert claude.served == 4 and local.served == 4  # one proposer session each, through the real SDKs

    mine = tmp_path / "runs" / "smoke" / "toy" / "whale-0.5,2-s0-my_h0"
    config = json.loads((mine / "config.json").read_text())
    expected = hashlib.sha256((tmp_path / "my_h0.py").read_bytes()).hexdigest()
    assert config["initial_harness"] == "my_h0.py" and config["provenance"]["initial_harness_sha256"] == expected
    assert (tmp_path / "runs" / "units" / "units" / "whale-0.5,2-s0" / "events.jsonl").exists()
    own_model = json.loads((tmp_path / "runs" / "units" / "units" / "weight_only-s0" / "config.json").read_text())
    assert Path(own_model["model"]).is_dir()
    ledger = list((tmp_path / "runs" / "smoke" / "toy" / "harness_only-s0" / "archive").rglob("proposer_ledger.jsonl"))
    assert ledger and any("anthropic" in path.read_text() for path in ledger)
