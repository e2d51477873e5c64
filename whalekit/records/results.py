"""Committed records of finished runs: a thin copy of a run directory under
`results/<preset>/<domain>/<run>/`, small enough to commit, from which every figure and
table is regenerated (`make figures`), with the provenance that names the code and CPU.

Why a thin run directory rather than a format of its own: the readers of run directories
(`whalekit.report.tables`, `whalekit.report.plots`, the viewer) then read a record unchanged, so a
figure drawn from `results/` is the figure drawn from `runs/`. What a record keeps:

    config.json          the run's configuration; provenance gains cpu_kind (and git_tag) when missing
    record.json          what was kept and what was left out (schema_version)
    events.jsonl         the run's events as they are: test metrics, RSFT batches, search iterations
    state.json           {"finished": true, "record": true}: `RunDir.done` holds
    test/eval-NNN.jsonl  per test sample, in the run's order: task, subset, sample, correct, reward,
                         the numeric behaviour flags (no turns, messages or token ids)
    archive/             every candidate's meta.json and scores.json; harness.py only for the harnesses
                         the run evaluated on test and their lineage (a stub line for the others)
    examples.jsonl       EXAMPLES full trajectories of the final evaluation, for the viewer (no prompt ids)

No checkpoints, no archive trajectories. The figures refuse records made by other code
(`check_same_code`): a set is made at one commit and re-made as a whole when the code a run
executes changes (`code_identity`; `export_run` adds the run's code to `results/run_code.json`).

    record = export_run(Path("runs/cpu/math/whale-0.6,6-s0"))   # -> results/cpu/math/whale-0.6,6-s0
    check_same_code(run_summaries.find_runs("results", "cpu"))  # MixedRecordsError naming the odd ones
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.runs import RunDir, atomic_write, read_jsonl_records
from whalekit.presets import flatten
from whalekit.records.code_identity import RunCode, register
from whalekit.run.provenance import PACKAGE_DIR
from whalekit.search.archive import Archive, archive_folders
from whalekit.types import Trajectory

SCHEMA_VERSION = 1
RESULTS_ROOT = Path("results")
STAGING = ".export"  # under results_root: records being written, and old ones being replaced (git-ignored)
EXAMPLES = 3  # full trajectories of the final evaluation kept for the trace viewer
# A test sample's fields a record keeps, with its numeric `flags`: what tables and figures read (the
# domain, harness and weights version of an evaluation are in its test_eval event; not a Trajectory)
TEST_FIELDS = ("task_id", "subset", "sample_index", "correct", "reward")
STUB_SOURCE = ('"""Not kept in this record (whalekit.records.results): a record keeps the source of the harnesses '
               'the run evaluated on test and their lineage; the run directory has every candidate\'s."""\n')
LEFT_OUT = ("checkpoints/", "test trajectories' turns, messages and token ids (examples.jsonl keeps a few)",
            "archive trajectories and outcomes", "sources of candidates off the evaluated lineage",
            "stages.json (resume state)", "tracking/")
# Configuration keys that do not change what a run computes (as whale.config_changes)
NOT_CONFIGURATION = ("runs_root",)
NOT_CONFIGURATION_PREFIXES = ("provenance.", "backend.", "tracking.")


class UnfinishedRunError(ValueError):
    """Only a finished run is exported: a record stands for a whole run."""


class MixedRecordsError(ValueError):
    """The records behind one set of figures were made by different code."""


class _Run(Protocol):  # a run_summaries.RunSummary, or anything else with a folder and its config
    path: Path
    config: dict[str, Any]


# -- where records (and the figures made from them) live -----------------------------------
def record_path(config: Any, results_root: str | Path = RESULTS_ROOT) -> Path:
    """Where the record of a run with this configuration (a whale.RunConfig) goes:
    results_root/<preset name>/<domain>/<run name>, whether or not it exists yet."""
    return Path(results_root) / Path(config.preset).stem / config.domain / config.run_name


COMMITTED_PRESETS = ("cpu", "cpu-v3")  # the presets whose records (results/<preset>/) are committed
# The preset whose figures are the repository's (figures/): the v2 set until the v3 set is complete
# (docs/reproduction-v3.md); every other preset's go below figures/<preset>/.
DEFAULT_FIGURES_PRESET = "cpu"


def figures_dir(preset: str, root: str | Path = "figures") -> Path:
    """Where a preset's figures and tables go by default: those of `DEFAULT_FIGURES_PRESET`
    are the ones committed in `root`; every other preset (cpu-v3, smoke, paper, a preset file)
    writes below `root/<preset name>/`, so neither a smoke pass nor a partial v3 set overwrites
    the default figures."""
    name = Path(preset).stem
    return Path(root) if name == DEFAULT_FIGURES_PRESET else Path(root) / name


def records_dir(preset: str, runs_root: str | Path = "runs", root: str | Path = RESULTS_ROOT) -> Path:
    """Where the reproduction exports a preset's run records by default: `root` (results/,
    committed) for a committed preset; every other preset's go under runs_root/records/
    (ignored by git), so a smoke pass leaves the tracked tree, the run-code ledger included,
    as it found it."""
    return Path(root) if Path(preset).stem in COMMITTED_PRESETS else Path(runs_root) / "records"


def find_record(results_root: str | Path, preset: str, domain: str, run_name: str) -> Path | None:
    """The record of one run, or None when there is no finished one."""
    folder = Path(results_root) / Path(preset).stem / domain / run_name
    return folder if is_record(folder) else None


def is_record(folder: str | Path) -> bool:
    """A finished record (not a run directory, not half an export)."""
    folder = Path(folder)
    return (folder / "record.json").exists() and RunDir(folder).done


def choose_root(results_root: str | Path | None, runs_root: str | Path, preset: str,
                log: Callable[[str], None] = print) -> Path:
    """Where figures and tables read `preset` from, said either way: the committed records
    when results_root holds a finished one for it, else the run directories; results_root
    None reads the run directories (your own runs) whatever is committed."""
    runs = Path(runs_root) / Path(preset).stem
    if results_root is None:
        log(f"reading your run directories under {runs} (results_root is None)")
        return Path(runs_root)
    base = Path(results_root) / Path(preset).stem
    if any(RunDir(p.parent).done for p in base.glob("*/*/config.json")):
        log(f"reading the committed records under {base} (results_root = None reads {runs} instead)")
        return Path(results_root)
    log(f"no records under {base}: reading the run directories under {runs}")
    return Path(runs_root)


# -- export ------------------------------------------------------------------------------
def export_run(run_dir: str | Path, results_root: str | Path = RESULTS_ROOT) -> Path:
    """Write the record of the finished run in `run_dir` to
    results_root/<preset>/<domain>/<run name>/ and return that folder. The record is built
    whole beside its place (every file through `atomic_write`) and renamed into place, so a
    kill leaves the old record or the new one; exporting again replaces it."""
    run = RunDir(run_dir)
    if not run.config_path.exists():
        raise UnfinishedRunError(f"{run.root}: not a run directory (no config.json)")
    events = run.events()
    if not run.done or not any(e["event"] == "run_end" for e in events):
        raise UnfinishedRunError(f"{run.root}: the run has not finished (no finished state / run_end event); "
                                 "finish it (`whalekit run` resumes it) before exporting its record")
    config = run.config()
    target = Path(results_root) / Path(str(config["preset"])).stem / str(config["domain"]) / run.root.name
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built outside results_root/<preset>/, where no reader of records looks (a kill leaves it there)
    (Path(results_root) / STAGING).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=Path(results_root) / STAGING, prefix=f"{target.name}.", suffix=".tmp"))
    try:
        _write_record(run, config, events, staging)
        _replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _register_code(config.get("provenance") or {}, Path(results_root))
    return target


def _register_code(block: dict[str, Any], results_root: Path) -> None:
    """Put the code that made the run in the run-code ledger (`code_identity`), so a later
    edit outside what a run executes leaves the record valid: this checkout's code when it is
    still the code that ran, else the code of the commit the run started at, read from git,
    when the run started on a clean tree and that commit's package is the one that ran (edits
    made while a long run ran must not leave its record unknown)."""
    code = RunCode.of_package(PACKAGE_DIR)
    if block.get("source_sha256") == code.source_sha256:
        register(results_root, code, block.get("git_commit"))
        return
    commit = block.get("git_commit")
    if not commit or block.get("git_dirty") is not False:
        return
    try:
        made = RunCode.at_commit(str(commit))
    except (OSError, ValueError, subprocess.CalledProcessError):  # not a checkout, or git does not know it
        return
    if made.source_sha256 == block.get("source_sha256"):
        register(results_root, made, str(commit))


def _write_record(run: RunDir, config: dict[str, Any], events: list[dict[str, Any]], out: Path) -> None:
    added: list[str] = []
    config = dict(config, provenance=_completed_provenance(config.get("provenance"), added))
    atomic_write(out / "config.json", json.dumps(config, indent=1, sort_keys=True, default=str))
    atomic_write(out / "events.jsonl", run.events_path.read_text(encoding="utf-8"))
    names = [f"eval-{int(e['index']):03d}" for e in events if e["event"] == "test_eval"]
    for name in names:
        path = run.root / "test" / f"{name}.jsonl"
        if path.exists():
            rows = [_test_row(record) for record in read_jsonl_records(path)]
            atomic_write(out / "test" / f"{name}.jsonl", "".join(_line(row) for row in rows))
    final = names[-1] if names and (run.root / "test" / f"{names[-1]}.jsonl").exists() else None
    examples = choose_examples(run.trajectories(final)) if final else []
    atomic_write(out / "examples.jsonl", "".join(_line(_example(t)) for t in examples))
    evaluated = [str(e["accepted_id"]) for e in events
                 if e["event"] in ("test_eval", "run_end") and e.get("accepted_id")]
    kept, candidates = _write_archive(run.root / "archive", out / "archive", str(config["domain"]), evaluated)
    manifest = {"schema_version": SCHEMA_VERSION, "run": f"{Path(str(config['preset'])).stem}/{config['domain']}/"
                f"{run.root.name}", "evaluations": names,
                "examples": {"evaluation": final, "count": len(examples), "left_out": ["turns[].prompt_ids"]},
                "candidates": candidates, "harness_sources": kept, "added_to_provenance": added,
                "left_out": list(LEFT_OUT)}
    atomic_write(out / "record.json", json.dumps(manifest, indent=1, sort_keys=True))
    atomic_write(out / "state.json", json.dumps({"finished": True, "record": True}, indent=1, sort_keys=True))


def _completed_provenance(block: Any, added: list[str]) -> dict[str, Any]:
    """The run's provenance plus what the figures must be able to say: the CPU kind (taken
    here, at export, when the run did not record it) and the tag of its commit, if any."""
    provenance = dict(block) if isinstance(block, dict) else {}
    if "cpu_kind" not in provenance:
        provenance["cpu_kind"] = cpu_kind()
        added.append("cpu_kind")
    commit = provenance.get("git_commit")
    if not provenance.get("git_tag") and commit and commit != "unknown":
        tag = commit_tag(str(commit))
        if tag:
            provenance["git_tag"] = tag
            added.append("git_tag")
    return provenance


def commit_tag(commit: str, cwd: Path = PACKAGE_DIR) -> str | None:
    """The tag naming exactly `commit` (`git describe --tags --exact-match`), or None
    (no tag there, no git, or not a checkout)."""
    try:
        done = subprocess.run(["git", "describe", "--tags", "--exact-match", commit], cwd=cwd, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=str) + "\n"


def _test_row(record: dict[str, Any]) -> dict[str, Any]:
    """One test sample as the tables and figures read it: its scores and numeric flags."""
    flags = {k: v for k, v in record.get("flags", {}).items() if isinstance(v, (bool, int, float))}
    return {**{k: record[k] for k in TEST_FIELDS if k in record}, "flags": flags}


def _example(trajectory: Trajectory) -> dict[str, Any]:
    """A whole trajectory less its prompt ids (the messages carry the prompt's text; the
    run directory keeps the exact ids)."""
    data = trajectory.to_json()
    for turn in data["turns"]:
        turn["prompt_ids"] = []
    return data


def choose_examples(trajectories: Sequence[Trajectory], n: int = EXAMPLES) -> list[Trajectory]:
    """A few trajectories that show the agent at work, in the run's order: the first
    correct one with a tool call (else the first correct, else the first with a tool
    call), the first wrong one, then the first of other problems."""

    def rank(t: Trajectory) -> tuple[bool, bool]:
        return t.correct, any(turn.tool_calls for turn in t.turns)

    if not trajectories:
        return []
    best = max(rank(t) for t in trajectories)
    picks = [next(i for i, t in enumerate(trajectories) if rank(t) == best)]
    wrong = next((i for i, t in enumerate(trajectories) if not t.correct), None)
    if wrong is not None and wrong not in picks:
        picks.append(wrong)
    tasks = {trajectories[i].task_id for i in picks}
    for i, t in enumerate(trajectories):
        if len(picks) >= n:
            break
        if t.task_id not in tasks:
            picks.append(i)
            tasks.add(t.task_id)
    return [trajectories[i] for i in sorted(picks[:n])]


def lineage(archives: Iterable[Archive], ids: Iterable[str]) -> set[str]:
    """`ids` and all their ancestors, across every archive of a run (a round's seed is an
    earlier round's candidate: ids are content addresses)."""
    parents: dict[str, set[str]] = {}
    for archive in archives:
        for entry in archive.entries():
            parents.setdefault(entry.id, set()).update(entry.parent_ids)
    found: set[str] = set()
    todo = list(ids)
    while todo:
        node = todo.pop()
        if node not in found:
            found.add(node)
            todo.extend(parents.get(node, ()))
    return found


def _write_archive(source: Path, out: Path, domain: str, evaluated: list[str]) -> tuple[list[str], int]:
    """Copy every archive of the run (one, or one per harness phase), each candidate's
    metadata and scores, and the sources of `evaluated` and their lineage; returns the ids
    whose sources were kept and the number of candidates."""
    folders = archive_folders(source)
    archives = [Archive.open(folder, domain) for folder in folders]
    keep = lineage(archives, evaluated)
    kept: set[str] = set()
    candidates: set[str] = set()
    for folder, archive in zip(folders, archives):
        target = out / folder.relative_to(source)
        for entry in archive.entries():
            candidate = folder / "candidates" / entry.id
            for name in ("meta.json", "scores.json"):
                if (candidate / name).exists():
                    atomic_write(target / "candidates" / entry.id / name, (candidate / name).read_text("utf-8"))
            text = archive.source(entry.id) if entry.id in keep else STUB_SOURCE
            atomic_write(target / "candidates" / entry.id / "harness.py", text)
            candidates.add(entry.id)
            if entry.id in keep:
                kept.add(entry.id)
        Archive.open(target, domain)  # writes index.json, as the run's archive has it
    return sorted(kept), len(candidates)


def _replace_folder(staging: Path, target: Path) -> None:
    """Rename the finished record into place; an old record is moved aside first and
    removed after, so at every instant one whole record (or none yet) is there."""
    old = None
    if target.exists():
        old = staging.with_name(f"{staging.name}.old")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old)


def record_size(folder: str | Path) -> int:
    """Bytes of every file in a record (what a commit of it adds to the working tree)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


# -- reading back ------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """A record's configuration (without provenance), its provenance and its manifest."""

    path: Path
    config: dict[str, Any]
    provenance: dict[str, Any]
    manifest: dict[str, Any]


def read_record(folder: str | Path) -> Record:
    folder = Path(folder)
    if not is_record(folder):
        raise ValueError(f"{folder}: not a finished record (no record.json, or unfinished)")
    config = RunDir(folder).config()
    provenance = config.pop("provenance", None) or {}
    return Record(folder, config, provenance, json.loads((folder / "record.json").read_text(encoding="utf-8")))


def record_changes(record: Record, config: dict[str, Any], code: RunCode,
                   ledger: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """How a run with `config` (a RunConfig's to_json()) made by `code` would differ from
    `record` (empty: the record is that run; reuse it). Keys that do not change what a run
    computes (runs_root, backend, tracking) are ignored, and so is code a run does not
    execute (`code_identity`: `ledger` maps the record's source hash to its run modules)."""
    recorded, current = flatten(record.config), flatten(json.loads(json.dumps(config, default=str)))
    changes = [f"{key}: {recorded.get(key)!r} -> {current.get(key)!r}" for key in sorted(set(recorded) | set(current))
               if key not in NOT_CONFIGURATION and not key.startswith(NOT_CONFIGURATION_PREFIXES)
               and recorded.get(key) != current.get(key)]
    return changes + code.changes_since(record.provenance, ledger or {})


# -- one code version per set of figures ---------------------------------------------------
def _version(config: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    block = config.get("provenance") or {}
    commit = block.get("git_commit")
    return block.get("source_sha256"), None if commit in (None, "unknown") else commit, block.get("git_tag")


def _describe(version: tuple[str | None, str | None, str | None]) -> str:
    sha, commit, tag = version
    parts = [f"source {sha[:12]}" if sha else "no provenance recorded"]
    if commit:
        parts.append(f"commit {commit[:10]}")
    if tag:
        parts.append(f"tag {tag}")
    return ", ".join(parts)


def check_same_code(runs: Sequence[_Run]) -> dict[str, Any]:
    """The provenance all `runs` (records or run directories) share: one package source
    hash, and one git commit and tag where they are recorded. A mixed set raises
    MixedRecordsError naming every record that differs from the most common version, and
    what to do. Returns the shared provenance block (empty when none is recorded)."""
    if not runs:
        return {}
    versions = {run.path: _version(run.config) for run in runs}
    counts = Counter(versions.values())
    reference = max(counts, key=lambda v: (counts[v], v[0] or "", v[1] or "", v[2] or ""))

    def differs(version: tuple[str | None, str | None, str | None]) -> bool:
        return any(a != b and (i == 0 or (a is not None and b is not None)) for i, (a, b) in
                   enumerate(zip(version, reference)))

    odd = sorted(path for path, version in versions.items() if differs(version))
    if odd:
        lines = "\n".join(f"  {path}: {_describe(versions[path])}" for path in odd)
        raise MixedRecordsError(
            f"the figures need every record made by the same code; {counts[reference]} share "
            f"{_describe(reference)}, these {len(odd)} differ:\n{lines}\nRe-make them at that code (delete each folder "
            f"and run `make reproduce`, which re-runs and re-exports it), or re-make the whole set at the new code.")
    first = next(run for run in runs if versions[run.path] == reference)
    return dict(first.config.get("provenance") or {})


def record_examples(folder: str | Path) -> dict[str, list[Trajectory]] | None:
    """A record's example trajectories by evaluation name ({"eval-006": [...]}), for the
    trace viewer; None for a run directory (its test/ files hold every trajectory)."""
    folder = Path(folder)
    if not (folder / "record.json").exists():
        return None
    evaluation = json.loads((folder / "record.json").read_text(encoding="utf-8"))["examples"]["evaluation"]
    examples = [Trajectory.from_json(row) for row in read_jsonl_records(folder / "examples.jsonl")]
    return {evaluation: examples} if evaluation and examples else {}
