"""Is a proposed harness new code, or a composition the catalogue could have made?

Why: a code-writing proposer earns its cost only where it writes what the offline catalogue
cannot reach. A catalogue mechanism edits a harness by replacing or adding class members
(hooks, attributes) and module-level imports and helpers (`whalekit.domains.mechanisms`), so every
harness the catalogue reaches from a parent is built from a fixed pool of statements: the
parent's own and the mechanisms'. A candidate is **novel** when one of its statements (after
normalisation: `ast.dump`, which ignores formatting, comments and positions) is in neither
pool; a statement that does nothing (a docstring, `pass`, a bare
annotation) does not count. The check is conservative: it may call a combination of pool
statements that no order of mechanisms yields "reachable", never the reverse.

    is_novel(candidate_source, parent_source, domain.mechanisms())   # True: code the catalogue lacks
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable
from typing import Any

from whalekit.domains.mechanisms import Mechanism


def _is_inert(node: ast.stmt) -> bool:
    """A statement that does nothing: a docstring or other bare constant, `pass`, or a bare
    annotation (`name: 'text'`, how a stray prose line can parse)."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) or isinstance(node, ast.Pass) \
        or (isinstance(node, ast.AnnAssign) and node.value is None)


def _harness_class(tree: ast.Module) -> ast.ClassDef | None:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    return classes[0] if len(classes) == 1 else None


def _dumps(nodes: Iterable[ast.stmt]) -> set[str]:
    return {ast.dump(n) for n in nodes if not _is_inert(n)}


def _split(source: str) -> tuple[set[str], set[str], str] | None:
    """(module-level statements, class members, class header) of a harness module, each
    normalised; None when it is not one parsable module with one class."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    cls = _harness_class(tree)
    if cls is None:
        return None
    header = cls.name + "".join(ast.dump(n) for n in [*cls.bases, *cls.keywords, *cls.decorator_list])
    return _dumps(n for n in tree.body if n is not cls), _dumps(cls.body), header


def catalogue_pool(parent_source: str, mechanisms: Iterable[Mechanism]) -> tuple[set[str], set[str]]:
    """The statements the catalogue can place in a child of `parent_source`: (module level,
    class members)."""
    parts = _split(parent_source)
    module, members = (set(parts[0]), set(parts[1])) if parts else (set(), set())
    for mechanism in mechanisms:
        members |= _dumps(ast.parse(textwrap.dedent(code)).body[0] for code in mechanism.methods.values())
        members |= _dumps(ast.parse(f"{name} = {expression}").body[0]
                          for name, expression in mechanism.attributes.items())
        module |= _dumps(ast.parse(line).body[0] for line in mechanism.imports)
        if mechanism.module_code:
            module |= _dumps(ast.parse(textwrap.dedent(mechanism.module_code)).body)
    return module, members


def novel_statements(source: str, parent_source: str, mechanisms: Iterable[Any]) -> int:
    """How many of `source`'s statements the catalogue could not have written (0: a
    catalogue composition; -1 when `source` is not a one-class module)."""
    parts, parent = _split(source), _split(parent_source)
    if parts is None:
        return -1
    module_pool, member_pool = catalogue_pool(parent_source, mechanisms)
    module, members, header = parts
    extra = len(module - module_pool) + len(members - member_pool)
    return extra + (parent is not None and header != parent[2])


def added_statements(source: str, parent_source: str) -> int:
    """How many of `source`'s statements (module level and class members, normalised) its
    parent does not have: 0 for a copy, a reformatting or deletions only."""
    parts, parent = _split(source), _split(parent_source)
    if parts is None or parent is None:
        return -1
    return len(parts[0] - parent[0]) + len(parts[1] - parent[1]) + (parts[2] != parent[2])


def is_novel(source: str, parent_source: str, mechanisms: Iterable[Any]) -> bool:
    """Whether `source` holds code no composition of catalogue mechanisms on its parent has."""
    return novel_statements(source, parent_source, list(mechanisms)) != 0
