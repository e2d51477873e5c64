"""Provenance: config.json says which code and sampler made a run; a finished run made by
other code or another sampler is reported and reused only when explicitly allowed."""

from __future__ import annotations

import json

import pytest

from whalekit.infra.runs import RunDir
from whalekit.run import provenance as prov


def _run_with(tmp_path, block):
    run = RunDir(tmp_path / "run")
    run.write_config({"domain": "toy", **({"provenance": block} if block is not None else {})})
    return run.root


def test_the_block_names_version_commit_source_and_resolved_sampler():
    class VLLMSampler:  # stands in for whalekit.samplers.vllm.VLLMSampler
        pass

    block = prov.provenance("auto", VLLMSampler())
    assert block["sampler"] == "vllm" and block["sampler_requested"] == "auto"
    assert block["whalekit_version"] == "0.1.0"
    assert len(block["git_commit"]) == 40  # tests run from a checkout
    assert len(block["source_sha256"]) == 64 and block["source_sha256"] == prov.source_sha256()
    json.dumps(block)  # fits in config.json
    assert prov.resolved_sampler("hf") == "hf"
    assert prov.resolved_sampler("auto") in ("hf", "vllm")


def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    assert prov.git_commit(tmp_path) == "unknown" and prov.git_dirty(tmp_path) is None


def test_the_same_code_and_sampler_reuse_silently(tmp_path):
    current = prov.provenance("hf")
    assert prov.check_reuse(_run_with(tmp_path, current), current) == []
    assert prov.check_reuse(tmp_path / "no-run-yet", current) == []


def test_a_run_made_by_other_code_or_another_sampler_is_refused_unless_allowed(tmp_path, monkeypatch):
    current = prov.provenance("hf")
    other_code = _run_with(tmp_path / "a", {**current, "source_sha256": "0" * 64, "git_commit": "f" * 40})
    with pytest.raises(prov.ForeignRunError, match=r"source_sha256: '0000.*git_commit: 'ffff"):
        prov.check_reuse(other_code, current)
    other_sampler = _run_with(tmp_path / "b", {**current, "sampler": "vllm"})
    with pytest.raises(prov.ForeignRunError, match=r"sampler: 'vllm' -> 'hf'"):
        prov.check_reuse(other_sampler, current)
    with pytest.warns(UserWarning, match="reused because"):
        assert prov.check_reuse(other_sampler, current, allow_foreign=True) == ["sampler: 'vllm' -> 'hf'"]
    monkeypatch.setenv(prov.REUSE_ENV, "1")
    with pytest.warns(UserWarning):
        assert prov.check_reuse(other_code, current)


def test_a_run_without_provenance_counts_as_foreign(tmp_path):
    with pytest.raises(prov.ForeignRunError, match="not recorded"):
        prov.check_reuse(_run_with(tmp_path, None), prov.provenance("hf"))


def test_only_the_commit_changing_is_not_other_code(tmp_path):
    current = prov.provenance("hf")
    assert prov.check_reuse(_run_with(tmp_path, {**current, "git_commit": "e" * 40}), current) == []
