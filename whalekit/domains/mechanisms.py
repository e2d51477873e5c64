"""Harness mechanisms: named, self-contained source edits that a proposer can apply to
any harness module. Each domain ships a catalogue (`domains/<name>/mechanisms.py`,
`CATALOGUE: list[Mechanism]`) of the levers that matter there (what is shown, answer
format, parsing leniency, error feedback, truncation, turn limits, few-shot examples…).

Applying a mechanism rewrites the harness's source: hook methods are replaced or added
in the one Harness subclass, class attributes set, imports added. The result is a new,
real harness file, not a flag in a fixed one.

    source = apply_mechanism(h0_source, CATALOGUE[0])

Shipped harnesses that are another harness plus catalogue mechanisms (the cpu preset's
`h0_cpu`, chess `h1`) are declared as `Composition`s in the domain's catalogue
(`COMPOSITIONS`) and written by `python -m whalekit.search.compositions`; a test checks every such
file equals its composition, so it cannot drift from the mechanisms it is made of.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from whalekit.domains.base import Domain


@dataclass(frozen=True)
class Mechanism:
    name: str
    hypothesis: str  # why it should help, in one sentence: recorded with the candidate
    targets: tuple[str, ...]  # failure modes it addresses (the domain's `failure_mode` names)
    methods: dict[str, str] = field(default_factory=dict)  # hook name -> full `def` source
    attributes: dict[str, str] = field(default_factory=dict)  # class attribute -> Python expression
    imports: tuple[str, ...] = ()  # import lines the methods need
    module_code: str = ""  # module-level helpers (constants, functions) the methods use
    # Failure modes it changes beyond `targets`, found by the v3 audit (the domain's
    # HOOK_FAILURE_MODES: what each hook it edits decides). Kept apart from `targets`, which the
    # v2 records' proposer weighed; a proposer weighs them with `weigh_alters`.
    alters: tuple[str, ...] = ()

    def hooks(self) -> set[str]:
        return set(self.methods) | set(self.attributes)

    def audited_targets(self) -> tuple[str, ...]:
        """Every failure mode it changes: its targets, then what the audit added."""
        return self.targets + tuple(mode for mode in self.alters if mode not in self.targets)


def _harness_class(tree: ast.Module) -> ast.ClassDef:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and any((isinstance(b, ast.Name) and b.id == "Harness") or
                       (isinstance(b, ast.Attribute) and b.attr == "Harness") for b in n.bases)]
    if len(classes) != 1:
        raise ValueError(f"expected one class deriving from Harness, found {len(classes)}")
    return classes[0]


def apply_mechanism(source: str, mechanism: Mechanism) -> str:
    """Return new harness source with `mechanism`'s hooks, attributes and imports."""
    tree = ast.parse(source)
    cls = _harness_class(tree)
    for name, method_source in mechanism.methods.items():
        new_def = ast.parse(textwrap.dedent(method_source)).body[0]
        if not isinstance(new_def, ast.FunctionDef) or new_def.name != name:
            raise ValueError(f"mechanism {mechanism.name}: source for {name!r} must be `def {name}(...)`")
        _replace_or_append(cls, name, new_def)
    for name, expression in mechanism.attributes.items():
        assign = ast.parse(f"{name} = {expression}").body[0]
        _replace_or_append(cls, name, assign)
    present = {ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    new_imports = [ast.parse(line).body[0] for line in mechanism.imports if ast.unparse(ast.parse(line)) not in present]
    if mechanism.module_code:
        helpers = ast.parse(textwrap.dedent(mechanism.module_code)).body
        defined = _top_level_names(tree)
        helpers = [h for h in helpers if not (_top_level_names(ast.Module(body=[h], type_ignores=[])) & defined)]
        index = tree.body.index(cls)
        tree.body[index:index] = helpers
    first_code = next((i for i, n in enumerate(tree.body) if not (isinstance(n, ast.Expr) and isinstance(
        getattr(n, "value", None), ast.Constant)) and not isinstance(n, (ast.Import, ast.ImportFrom))), 0)
    tree.body[first_code:first_code] = new_imports
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


@dataclass(frozen=True)
class Composition:
    """A shipped harness file `harnesses/<name>.py` that is `base` plus `mechanisms`,
    applied in order with `apply_mechanism`; `purpose` opens its docstring."""

    name: str
    base: str
    mechanisms: tuple[str, ...]
    purpose: str
    harness_name: str = ""  # the file's Harness `name`, its class named after it (chess-h1: ChessH1); "" keeps base's


def compose(source: str, mechanisms: list[Mechanism], docstring: str | None = None) -> str:
    """`source` with every mechanism applied in order; `docstring` replaces the module's."""
    for mechanism in mechanisms:
        source = apply_mechanism(source, mechanism)
    if docstring is None:
        return source
    tree = ast.parse(source)
    tree.body = [ast.Expr(ast.Constant(docstring)), *code_body(tree)]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def code_body(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements after its docstring (all of them when it has none)."""
    return tree.body[1:] if ast.get_docstring(tree, clean=False) is not None else tree.body


def renamed(source: str, harness_name: str) -> str:
    """`source` with its Harness subclass's `name` set to `harness_name` and the class named
    after it (`chess-h1` -> `ChessH1`)."""
    tree = ast.parse(source)
    cls = _harness_class(tree)
    cls.name = "".join(part[:1].upper() + part[1:] for part in harness_name.split("-"))
    _replace_or_append(cls, "name", ast.parse(f"name = {harness_name!r}").body[0])
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def composed_source(domain: Domain, composition: Composition) -> str:
    """The source `composition` stands for in `domain` (its catalogue and harnesses)."""
    catalogue = {m.name: m for m in domain.mechanisms() + domain.prompt_wordings()}
    missing = [name for name in composition.mechanisms if name not in catalogue]
    if missing:
        raise ValueError(f"{domain.name} composition {composition.name}: unknown mechanisms {missing}")
    docstring = (f"{composition.purpose}\n\nGenerated: {composition.base}.py plus the catalogue mechanisms "
                 f"{', '.join(composition.mechanisms)}\n(whalekit/domains/{domain.name}/mechanisms.py), "
                 f"applied in that order by `python -m whalekit.search.compositions`.\nDo not edit: change the "
                 f"composition or the mechanisms and regenerate; tests/test_cpu_start.py checks it.")
    source = domain.harness_source(composition.base)
    if composition.harness_name:
        source = renamed(source, composition.harness_name)
    return compose(source, [catalogue[n] for n in composition.mechanisms], docstring)


def _replace_or_append(cls: ast.ClassDef, name: str, node: ast.stmt) -> None:
    for i, existing in enumerate(cls.body):
        if isinstance(existing, ast.FunctionDef) and existing.name == name:
            cls.body[i] = node
            return
        if isinstance(existing, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in existing.targets):
            cls.body[i] = node
            return
    cls.body.append(node)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names

