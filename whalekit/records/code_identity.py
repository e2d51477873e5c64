"""Which code a run executes, so that a committed record is re-made only when that code
changes, not when the reporting around it does.

Why: a record is valid while the code that computed it is unchanged. Hashing the whole
package (`provenance.source_sha256`) made every edit count, so an edit to a table or a
plot planned to re-make all 102 cpu runs (about 40 h). The run's code is the static import
closure of the driver and of the parts it loads by name (domains, proposers, samplers,
backends, the harness worker): every `import` in those modules, at the top or inside a
function, followed through the package. Reporting and reproduction (tables, plots,
verdicts, stats, figures, the viewer, `reproduce`, `run_set`, `results`, the command line)
lie outside it, and `tests/test_code_identity.py` holds that they do.

A code version is identified by `source_sha256` (what every record's provenance carries);
the ledger `results/run_code.json` maps each version that made a record to the hash of
every module in its run closure, written when a record is exported, or after the fact from
git (`python -m whalekit.records.code_identity --commit <sha> --results results`). A record counts
for this checkout when every module of its version's closure is byte-identical here.
A new module that no old module imports cannot change an old run, so it does not count.
Code whose modules differ but whose runs were shown to give identical events
(`whalekit.repro.code_equivalence`, recorded as `equivalent_to` in the ledger) counts as the old.

    code = RunCode.of_package()
    code.changes_since(record_provenance, ledger_entries(Path("results")))   # [] -> still valid
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "whalekit"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # whalekit/, this module sitting in whalekit/records/
# The modules a run starts from: the driver, and the packages whose parts it loads by
# name (a domain, a proposer, a sampler, a backend) or runs in a sandbox (the worker).
RUN_ROOTS = ("whalekit.run.driver", "whalekit.domains", "whalekit.search.proposers", "whalekit.samplers",
             "whalekit.rollouts.backends", "whalekit.harness_helpers", "whalekit.harness_worker")
# The same roots in the flat layout the package had before its folders (commits up to 5e7cd74):
# an old commit's code is read with the roots it had, so its run closure is the one it ran.
FLAT_RUN_ROOTS = ("whalekit.whale", "whalekit.domains", "whalekit.proposers", "whalekit.samplers",
                  "whalekit.backends", "whalekit.harness_helpers", "whalekit.harness_worker")
LEDGER_NAME = "run_code.json"


def _module_name(path: str) -> str:
    """'whalekit/domains/base.py' -> 'whalekit.domains.base'; a package's __init__.py -> the package."""
    name = path[:-3].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _imports(name: str, path: str, text: str, modules: Mapping[str, str]) -> set[str]:
    """The package modules `text` imports anywhere (top, functions, TYPE_CHECKING blocks:
    conservative), and every package above each of them (their __init__ runs too)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    found: set[str] = set()
    for target in named:
        while target and target not in modules:  # `from pkg.mod import name` names a module or an attribute
            target = target.rpartition(".")[0]
        parts = target.split(".") if target else []
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
    return found


def run_closure(files: Iterable[str], read: Callable[[str], bytes], roots: Iterable[str] = RUN_ROOTS) -> list[str]:
    """The package files (paths like 'whalekit/weights/rsft.py') a run executes: the roots, every
    module under a root package, and everything they import, transitively."""
    modules = {_module_name(path): path for path in files if path.endswith(".py")}
    roots = tuple(roots)
    todo = [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = modules[module]
        todo.extend(_imports(module, path, read(path).decode(), modules) - seen)
    return sorted(modules[m] for m in seen)


@dataclass(frozen=True)
class RunCode:
    """One code version: the package source hash records carry, and the sha256 of every
    module in its run closure (path -> hash)."""

    source_sha256: str
    modules: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_files(cls, files: Iterable[str], read: Callable[[str], bytes]) -> RunCode:
        files = sorted((f for f in files if f.endswith(".py")), key=lambda f: tuple(f.split("/")))
        digest = hashlib.sha256()  # provenance.source_sha256's recipe, over the same files
        for path in files:
            digest.update(path.split("/", 1)[1].encode() + b"\0" + read(path) + b"\0")
        flat = "whalekit/whale.py" in files and "whalekit/run/driver.py" not in files
        closure = run_closure(files, read, FLAT_RUN_ROOTS if flat else RUN_ROOTS)
        return cls(digest.hexdigest(), {path: hashlib.sha256(read(path)).hexdigest() for path in closure})

    @classmethod
    def of_package(cls, package_dir: Path = PACKAGE_DIR) -> RunCode:
        """The code of a checkout or an installed package (its .py files)."""
        root = package_dir.parent
        files = [p.relative_to(root).as_posix() for p in package_dir.rglob("*.py")]
        return cls.of_files(files, lambda path: (root / path).read_bytes())

    @classmethod
    def at_commit(cls, commit: str, repo: Path = PACKAGE_DIR.parent) -> RunCode:
        """The code of `commit` in the git repository `repo`, read from git's objects."""
        def git(*args: str) -> bytes:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True, timeout=60).stdout

        files = git("ls-tree", "-r", "--name-only", commit, "--", PACKAGE).decode().split()
        return cls.of_files(files, lambda path: git("show", f"{commit}:{path}"))

    def changes_since(self, provenance: Mapping[str, Any], ledger: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """How the code a record was made by (its provenance block) differs from this code,
        in what a run executes; empty: the record is still this code's run. A version the
        ledger does not know is compared by its whole source hash."""
        recorded = str(provenance.get("source_sha256"))
        if recorded == self.source_sha256:
            return []
        entry = ledger.get(recorded)
        if entry is None:
            return [f"made by package source {recorded[:12]}, this checkout is {self.source_sha256[:12]} "
                    f"(that version is not in the ledger {LEDGER_NAME}, so every module counts)"]
        modules: Mapping[str, str] = entry["modules"]
        changed = [path for path, digest in modules.items() if self.modules.get(path) != digest]
        proven = self.proven_equivalent(ledger)
        if not changed or recorded in proven:
            return []
        # a version this code was proven to run as, whose run closure holds the record's own unchanged
        # (a move of every module, proven against the commit before it, keeps that commit's records)
        if any(all(dict(ledger[v]["modules"]).get(path) == digest for path, digest in modules.items())
               for v in proven if v in ledger):
            return []
        return [f"code a run executes changed since source {recorded[:12]}: " + ", ".join(
            f"{path} ({'removed' if path not in self.modules else 'edited'})" for path in sorted(changed))]


    def proven_equivalent(self, ledger: Mapping[str, Mapping[str, Any]]) -> set[str]:
        """The versions this code was shown to compute the same events as
        (`whalekit.repro.code_equivalence`): the `equivalent_to` chain from every entry whose run
        closure is exactly this code's (its own, or a version that differs from it only outside
        what a run executes: a proof made before an edit to reporting still holds after it), and
        on from each version reached through the proofs made for its run closure (this code as B,
        B as A: this code as A). A proof counts only while the modules a run executes are exactly
        the ones proven."""
        found: set[str] = set()
        frontier = [dict(self.modules)]
        while frontier:  # a version reached counts with the proofs made for its own run closure
            modules = frontier.pop()
            for proof in ledger.values():
                if dict(proof["modules"]) != modules:
                    continue
                entry: Mapping[str, Any] | None = proof
                while entry is not None and entry.get("equivalent_to") and entry["equivalent_to"] not in found:
                    found.add(entry["equivalent_to"])
                    entry = ledger.get(entry["equivalent_to"])
                    if entry is not None:
                        frontier.append(dict(entry["modules"]))
        return found


def ledger_path(results_root: Path) -> Path:
    return Path(results_root) / LEDGER_NAME


def ledger_entries(results_root: Path) -> dict[str, dict[str, Any]]:
    """source_sha256 -> {"commit": ..., "modules": {path: sha256}} for every code version
    that made a record under `results_root` (empty when there is no ledger yet)."""
    path = ledger_path(results_root)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "modules" in v for v in data.values()):
        raise ValueError(f"{path}: not a run-code ledger (source_sha256 -> {{commit, modules}}); "
                         f"rebuild it with `python -m whalekit.records.code_identity --commit <sha>`")
    return data


def register(results_root: Path, code: RunCode, commit: str | None) -> bool:
    """Add `code` to the ledger under `results_root` unless it is there; True when added."""
    entries = ledger_entries(results_root)
    if code.source_sha256 in entries:
        return False
    entries[code.source_sha256] = {"commit": commit, "modules": dict(sorted(code.modules.items()))}
    path = ledger_path(results_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    tmp.replace(path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whalekit.records.code_identity",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", help="register the code of this git commit (default: this checkout)")
    parser.add_argument("--results", default="results", help="the records' root, where the ledger lives")
    parser.add_argument("--list", action="store_true", help="print the modules a run executes and exit")
    args = parser.parse_args(argv)
    code = RunCode.at_commit(args.commit) if args.commit else RunCode.of_package()
    if args.list:
        print("\n".join(code.modules))
        return 0
    added = register(Path(args.results), code, args.commit)
    print(f"{'added' if added else 'already in'} {ledger_path(Path(args.results))}: source {code.source_sha256[:12]}, "
          f"{len(code.modules)} modules a run executes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
