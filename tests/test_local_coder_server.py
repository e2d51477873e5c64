"""The local proposer against the real thing: llama.cpp's server on Qwen2.5-Coder-1.5B, one
proposer iteration through the `openai` SDK with validation and repair, and no server left
behind. Slow (a candidate takes minutes on two cores); skipped where the model or llama.cpp
is not installed (the local-proposer extra)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from whalekit.domains.math import MathDomain
from whalekit.sandbox.isolation import validate_source
from whalekit.search.archive import Archive
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.local_coder import LocalCoderConfig, LocalCoderProposer
from whalekit.search.proposers.local_models import ProposerModelError, proposer_model_path
from whalekit.search.proposers.local_server import llama_cpp_available

pytestmark = pytest.mark.slow


def _model_or_skip() -> None:
    if not llama_cpp_available():
        pytest.skip("llama-cpp-python[server] is not installed (the local-proposer extra; `make install` adds it)")
    try:
        proposer_model_path("qwen2.5-coder-1.5b")
    except ProposerModelError as exc:
        pytest.skip(f"the coder model is not installed: {exc}")


def _server_processes() -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"llama_cpp.server" in status.read_bytes():
                found.append(int(status.parent.name))
        except OSError:
            continue
    return found


def test_one_iteration_writes_a_valid_module_through_the_real_server_and_leaves_no_process(tmp_path):
    _model_or_skip()
    domain = MathDomain()
    archive = Archive.open(tmp_path / "run" / "archive", domain.name)
    archive.ensure_seed(domain.initial_harness_source("h0_cpu"))
    proposer = LocalCoderProposer(domain, LocalCoderConfig(max_tokens=1500, max_repairs=1), seed=0,
                                  ledger=Ledger.for_archive(archive), run_dir=tmp_path / "run")
    started = time.perf_counter()
    try:
        candidates = proposer.propose(archive, n=1)
    finally:
        proposer.close()
    events = Ledger.for_archive(archive).events()
    responses = [e for e in events if e["kind"] == "response"]
    assert responses and all(e["tokens_out"] > 0 and e["cached"] is False for e in responses)
    print(f"\nlocal proposer: {len(candidates)} candidate(s) in {time.perf_counter() - started:.0f} s, "
          f"{len(responses)} request(s), tokens in/out {[(e['tokens_in'], e['tokens_out']) for e in responses]}")
    # either a valid module, or the repairs were used up and said why
    if candidates:
        assert validate_source(candidates[0].source) is None and candidates[0].parent_ids == [archive.seed_id()]
    else:
        assert [e for e in events if e["kind"] == "rejected"][0]["problem"]
    assert (tmp_path / "run" / "proposer-server.log").exists()
    deadline = time.time() + 15
    while _server_processes() and time.time() < deadline:
        time.sleep(0.5)
    assert _server_processes() == [], "the server ended with close()"
