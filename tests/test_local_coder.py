"""The local proposer: one request per candidate with the contract, the parent's source, the
failure report and ideas (never catalogue code); a rejected module goes back to the model
with the reason, up to max_repairs times; every request is stored and replayed by content
hash; a candidate is novel when it holds code no catalogue composition of its parent has.
The model here is injected (the real server's test is in tests/test_local_coder_server.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from test_episode_text import chess_like_episode

from whalekit.domains.mechanisms import apply_mechanism
from whalekit.domains.toy import ToyDomain
from whalekit.search.archive import Archive
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.local_coder import LocalCoderConfig, LocalCoderProposer, copied_cut, splice, split_reply
from whalekit.search.proposers.novelty import is_novel
from whalekit.search.proposers.random_catalogue import RandomCatalogueProposer

DOMAIN = ToyDomain()
H0 = DOMAIN.initial_harness_source()
NEW_CODE = H0.rstrip() + "\n\n    def should_stop(self, state):\n        return state.turn >= 2\n"


class ScriptedModel:
    """Replies in order; remembers every request it was sent."""

    def __init__(self, *replies: str):
        self.replies, self.requests = list(replies), []

    def __call__(self, messages: list[dict[str, str]], request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append([dict(m) for m in messages])
        return {"text": self.replies.pop(0), "tokens_in": 1000, "tokens_out": 200, "wall_s": 2.0, "cpu_s": 3.5}


def _fenced(source: str, hypothesis: str = "stopping sooner avoids loops") -> str:
    return f"Here it is.\n```python\n{source}```\nHypothesis: {hypothesis}\n"


def _proposer(tmp_path: Path, model: ScriptedModel, **config: Any) -> tuple[LocalCoderProposer, Archive]:
    config.setdefault("edit", "module")
    archive = Archive.open(tmp_path / "archive", "toy")
    archive.ensure_seed(H0)
    ledger = Ledger.for_archive(archive)
    return LocalCoderProposer(DOMAIN, LocalCoderConfig(**config), seed=0, ledger=ledger, run_dir=tmp_path,
                              complete=model), archive


def test_a_reply_gives_its_last_code_block_and_its_hypothesis_line():
    source, hypothesis = split_reply("```python\nx = 1\n```\ntext\n```python\ny = 2\n```\n**Hypothesis:** shorter")
    assert source == "y = 2\n" and hypothesis == "shorter"
    assert split_reply("no code here") == (None, "")


def test_the_prompt_carries_the_contract_the_parent_and_ideas_but_no_catalogue_code(tmp_path):
    model = ScriptedModel(_fenced(NEW_CODE))
    proposer, archive = _proposer(tmp_path, model)
    [candidate] = proposer.propose(archive, n=1)
    system, user = model.requests[0][0]["content"], model.requests[0][1]["content"]
    assert "The harness contract" in system and H0.strip().splitlines()[-1].strip() in user
    for mechanism in DOMAIN.mechanisms():
        assert mechanism.name in user, "each mechanism is offered as an idea"
        own = [textwrap.dedent(code).strip() for code in mechanism.methods.values()]
        assert not any(code in user for code in own if code not in H0), "never its code"
    assert candidate.hypothesis == "stopping sooner avoids loops" and candidate.parent_ids == [archive.seed_id()]
    assert candidate.meta["repairs"] == 0 and candidate.meta["tokens_in"] == 1000 and candidate.meta["cpu_s"] == 3.5


def test_a_rejected_module_goes_back_with_the_reason_and_the_repair_is_kept(tmp_path):
    broken = NEW_CODE.replace("return state.turn >= 2", "return eval('1')")
    model = ScriptedModel(_fenced(broken), "I forgot the block", _fenced(NEW_CODE))
    proposer, archive = _proposer(tmp_path, model, max_repairs=2)
    [candidate] = proposer.propose(archive, n=1)
    assert candidate.meta["repairs"] == 2 and len(model.requests) == 3
    assert "Rejected:" in model.requests[1][-1]["content"] and "eval" in model.requests[1][-1]["content"]
    assert "no ```python block" in model.requests[2][-1]["content"]
    kinds = [e["kind"] for e in Ledger.for_archive(archive).events()]
    assert kinds.count("response") == 3 and kinds[-1] == "candidate"


def test_a_module_still_rejected_after_the_repairs_is_recorded_and_not_proposed(tmp_path):
    model = ScriptedModel(_fenced(H0), _fenced(H0))  # the parent itself: already in the archive
    proposer, archive = _proposer(tmp_path, model, max_repairs=1)
    assert proposer.propose(archive, n=1) == []
    rejected = [e for e in Ledger.for_archive(archive).events() if e["kind"] == "rejected"]
    assert len(rejected) == 1 and "already in the archive" in rejected[0]["problem"]


def test_a_copy_of_the_parent_that_only_deletes_goes_back_as_no_change(tmp_path):
    trimmed = H0.replace('"""', '"""Only the docstring moved. ', 1)
    model = ScriptedModel(_fenced(trimmed), _fenced(NEW_CODE))
    proposer, archive = _proposer(tmp_path, model, max_repairs=1)
    [candidate] = proposer.propose(archive, n=1)
    assert "adds or changes no code" in model.requests[1][-1]["content"] and candidate.meta["repairs"] == 1


def test_a_stored_reply_is_replayed_without_the_model(tmp_path):
    proposer, archive = _proposer(tmp_path, ScriptedModel(_fenced(NEW_CODE)))
    first = proposer.propose(archive, n=1)
    again, _ = _proposer(tmp_path, ScriptedModel())  # a model with nothing to say: never asked
    replay = again.propose(Archive.open(tmp_path / "archive", "toy"), n=1)
    assert [c.source for c in replay] == [c.source for c in first] and replay[0].meta["cached"] == 1


def test_novel_means_code_no_catalogue_composition_of_the_parent_has():
    mechanisms = DOMAIN.mechanisms()
    composed = apply_mechanism(apply_mechanism(H0, mechanisms[0]), mechanisms[-1])
    assert not is_novel(composed, H0, mechanisms)
    assert not is_novel(H0.replace('"""', '"""Reworded docstring. ', 1), H0, mechanisms)
    assert is_novel(NEW_CODE, H0, mechanisms)


def test_the_random_catalogue_control_draws_seeded_mechanism_sets_on_the_seed_harness(tmp_path):
    archive = Archive.open(tmp_path / "archive", "toy")
    archive.ensure_seed(H0)
    first = RandomCatalogueProposer(DOMAIN.mechanisms(), seed=3).propose(archive, n=3)
    again = RandomCatalogueProposer(DOMAIN.mechanisms(), seed=3).propose(archive, n=3)
    assert [c.source for c in first] == [c.source for c in again] and len({c.source for c in first}) == 3
    assert all(c.parent_ids == [archive.seed_id()] and not is_novel(c.source, H0, DOMAIN.mechanisms())
               for c in first)


def test_in_hooks_mode_the_model_writes_only_the_methods_it_changes_and_they_are_spliced_in(tmp_path):
    edit = "import re\n\ndef should_stop(self, state):\n    return state.turn >= 2\n"
    model = ScriptedModel(_fenced("def helper():\n    return 1\n"), _fenced(edit))
    proposer, archive = _proposer(tmp_path, model, edit="hooks", max_repairs=1)
    [candidate] = proposer.propose(archive, n=1)
    assert "no method of the Harness class" in model.requests[1][-1]["content"]
    assert "only the methods you change" in model.requests[0][1]["content"]
    assert "def should_stop(self, state)" in candidate.source and candidate.meta["novel"]
    for line in H0.strip().splitlines():
        if line.strip().startswith("def "):
            assert line.strip() in candidate.source, "the parent's other hooks are kept"


def test_a_spliced_edit_that_does_not_parse_says_where():
    source, problem = splice("def parse(self, reply, state):\n    return (", H0)
    assert source is None and "syntax error at line" in str(problem)


def test_the_proposers_of_one_run_share_one_server(monkeypatch, tmp_path):
    from whalekit.search.proposers import local_coder

    started = []

    class FakeServer:
        def __init__(self):
            self.process, self.closed = type("P", (), {"poll": lambda self: None})(), False

        def close(self):
            self.closed = True

    def start(model_path, run_dir, options):
        started.append(FakeServer())
        return started[-1]

    monkeypatch.setattr(local_coder, "start_llama_server", start)
    monkeypatch.setattr(local_coder, "proposer_model_path", lambda spec: tmp_path / "model.gguf")
    config = LocalCoderConfig()
    first, second = local_coder.shared_server(config, tmp_path), local_coder.shared_server(config, tmp_path)
    assert first is second and len(started) == 1, "a new proposer per harness step reuses the running server"
    local_coder.close_shared_server(first)
    assert first.closed and local_coder.shared_server(config, tmp_path) is not first
    local_coder.close_shared_server(started[-1])


def test_a_hypothesis_line_inside_the_code_block_is_prose_not_code():
    reply = "```python\ndef should_stop(self, state):\n    return True\nhypothesis: 'stop early'\n```\n"
    source, hypothesis = split_reply(reply)
    assert source == "def should_stop(self, state):\n    return True\n" and hypothesis == "stop early"
    assert not is_novel(H0.rstrip() + "\n\nhypothesis: 'stop early'\n", H0, DOMAIN.mechanisms()), \
        "a bare annotation does nothing: not novel code"


def test_a_repair_turn_quotes_the_named_line_and_carries_only_the_latest_attempt(tmp_path):
    broken = NEW_CODE.replace("return state.turn >= 2", "return eval('1')")
    model = ScriptedModel(_fenced(broken), _fenced(broken), _fenced(NEW_CODE))
    proposer, archive = _proposer(tmp_path, model, max_repairs=2)
    [candidate] = proposer.propose(archive, n=1)
    line = next(n for n, text in enumerate(broken.splitlines(), 1) if "eval(" in text)
    repair = model.requests[1][-1]["content"]
    assert f">> {line:3d} |" in repair and "eval('1')" in repair, "the offending line, numbered and marked"
    assert [m["role"] for m in model.requests[2]] == ["system", "user", "assistant", "user"], \
        "the first request, the latest attempt and its rejection: not the chain of failed attempts"
    assert candidate.meta["repairs"] == 2


def test_the_search_stage_dry_run_verdict_goes_back_to_the_model(tmp_path):
    model = ScriptedModel(_fenced(NEW_CODE), _fenced(NEW_CODE.replace(">= 2", ">= 3")))
    proposer, archive = _proposer(tmp_path, model, max_repairs=1)
    checked: list[str] = []
    proposer.dry_run = lambda source: (checked.append(source) or
                                       ("dry run failed: harness_error: boom" if len(checked) == 1 else None))
    [candidate] = proposer.propose(archive, n=1)
    assert "dry run failed: harness_error: boom" in model.requests[1][-1]["content"]
    assert ">= 3" in candidate.source and len(checked) == 2


def test_a_block_the_model_never_closed_runs_to_the_hypothesis_line():
    reply = "```python\ndef should_stop(self, state):\n    return True\n\nHypothesis: stop early\nmore prose\n"
    assert split_reply(reply) == ("def should_stop(self, state):\n    return True\n", "stop early")
    assert split_reply("```python\n") == (None, "")


def test_a_reply_cut_at_the_token_limit_goes_back_as_too_long(tmp_path):
    class CutModel(ScriptedModel):
        def __call__(self, messages, request):
            reply = super().__call__(messages, request)
            return {**reply, "finish_reason": "length" if len(self.requests) == 1 else "stop"}

    model = CutModel("```python\ndef should_stop(self, state):\n    return (state.turn", _fenced(NEW_CODE))
    proposer, archive = _proposer(tmp_path, model, max_repairs=1, max_tokens=64)
    [candidate] = proposer.propose(archive, n=1)
    assert "cut at the 64-token limit" in model.requests[1][-1]["content"] and candidate.meta["repairs"] == 1


def test_the_local_coder_sees_the_failing_reply_and_a_copied_cut_goes_back_to_it(tmp_path: Path):
    archive = Archive.open(tmp_path / "archive", "toy")
    seed = archive.ensure_seed(H0)
    archive.record_evaluation(seed, 0, [chess_like_episode()], ["format"])
    copied = NEW_CODE.replace("return state.turn >= 2", "return 'Legal moves: [… 412 chars cut …]' == ''")
    model = ScriptedModel(_fenced(copied), _fenced(NEW_CODE))
    proposer = LocalCoderProposer(DOMAIN, LocalCoderConfig(edit="module", max_repairs=1), seed=0, run_dir=tmp_path,
                                  complete=model)
    [candidate] = proposer.propose(archive, n=1)
    assert "[assistant] I pick <move>e2e4" in model.requests[0][1]["content"]
    assert "a trace was shortened" in model.requests[1][-1]["content"] and candidate.meta["repairs"] == 1
    assert copied_cut(copied, copied) is None, "a marker the parent already holds is not the model's copy"


def test_a_hook_written_without_self_goes_back_instead_of_joining_the_module_as_dead_code():
    source, problem = splice("def format_tool_result(result, state):\n    return 'x'\n", H0)
    assert source is None and "def format_tool_result(self, ...)" in str(problem)
    helper, fine = splice("def tidy(text):\n    return text.strip()\n\n"
                          "def should_stop(self, state):\n    return tidy('a') == 'a'\n", H0)
    assert fine is None and "def tidy(text)" in str(helper), "a helper of its own name still joins the module"
