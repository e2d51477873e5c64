"""The domain's rules for a proposer: stated in its system prompt, and checked on every
written candidate where a static check can tell.

Why: the authors' proposer works under anti-cheating rules (chess: the harness talks to
the model, it must not play chess for it; no dataset names or hard-coded examples; no
parameter tuning). Text alone is a request; the checks below turn what can be seen in the
source into a rejection the model reads at once. They are heuristics over the AST, not
proofs: a determined rewrite can hide a move ranking, so the text stays in the prompt too.
A domain may define `proposer_rules` (a `DomainRules`) to replace the entry here.

    rules = rules_for(domain); problem = rules.check(source, parent_source, search_task_ids)
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

COMMON_RULES = (
    "Each candidate changes exactly one mechanism (a prompt architecture, a parser, an observation format, "
    "a retry or feedback policy, a stopping rule, ...) and states its hypothesis.",
    "No parameter tuning: a candidate whose only change from its parent is numeric constants is rejected.",
    "No dataset names, task ids, reference answers or copied examples from the problems you read.",
)


@dataclass
class DomainRules:
    text: tuple[str, ...] = ()  # stated in the system prompt after COMMON_RULES
    banned_imports: tuple[str, ...] = ()  # modules (beyond the isolation allow-list) named in the message
    banned_words: tuple[str, ...] = ()  # case-insensitive, in string constants or identifiers
    banned_identifiers: str | None = None  # regex over identifiers (function, variable names)
    no_ranking_by: tuple[str, ...] = ()  # sort/min/max keys may not mention these words (regex, case-insensitive)
    no_ranking_markers: tuple[str, ...] = ()  # ... nor test for these exact strings (e.g. SAN's "+", "x")
    extra: list[Any] = field(default_factory=list)  # callables (tree) -> problem | None

    def prompt(self) -> str:
        return "\n".join(f"- {line}" for line in COMMON_RULES + self.text)

    def check(self, source: str, parent_source: str | None = None,
              task_ids: set[str] | list[str] | None = None) -> str | None:
        """The first rule the source breaks, phrased for the proposer, or None."""
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return None  # validation reports syntax errors
        for node in ast.walk(tree):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                if module.split(".")[0] in self.banned_imports:
                    return f"domain rule: importing {module!r} is banned (the harness must not solve the task)"
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        names = _identifiers(tree)
        for word in self.banned_words:
            pattern = re.compile(re.escape(word), re.I)
            if any(pattern.search(s) for s in strings + names):
                return f"domain rule: the dataset or tool name {word!r} may not appear in a harness"
        for task_id in sorted(task_ids or ()):
            if len(task_id) >= 6 and any(task_id in s for s in strings):
                return f"domain rule: the harness hard-codes the problem id {task_id!r}"
        if self.banned_identifiers:
            pattern = re.compile(self.banned_identifiers, re.I)
            hit = next((n for n in names if pattern.search(n)), None)
            if hit:
                return f"domain rule: {hit!r} looks like search or evaluation inside the harness, which is banned"
        if self.no_ranking_by or self.no_ranking_markers:
            problem = _ranking_problem(tree, self.no_ranking_by, self.no_ranking_markers)
            if problem:
                return problem
        for extra in self.extra:
            problem = extra(tree)
            if problem:
                return problem
        if parent_source is not None and _only_numbers_changed(parent_source, source):
            return ("domain rule: only numeric constants (and names or docstrings) differ from the parent; parameter "
                    "tuning is not a mechanism")
        return None


def _identifiers(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        elif isinstance(node, ast.arg):
            out.append(node.arg)
    return out


def _ranking_problem(tree: ast.AST, words: tuple[str, ...], markers: tuple[str, ...]) -> str | None:
    """A sort/sorted/min/max/heapq call whose key mentions a banned feature (e.g. checks,
    captures), or a comparison against the SAN check/capture markers used to order moves."""
    pattern = re.compile("|".join(words) or "(?!)", re.I)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in ("sorted", "sort", "min", "max", "nlargest", "nsmallest"):
            continue
        key = next((k.value for k in node.keywords if k.arg == "key"), None)
        if key is None:
            continue
        strings = [n.value for n in ast.walk(key) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        hit = next((m for m in strings + _identifiers(key) if pattern.search(m)), None)
        hit = hit if hit is not None else next((m for m in strings if m.strip() in markers), None)
        if hit is not None:
            return (f"domain rule: line {node.lineno} orders candidates by {hit!r}; move ordering by check, "
                    "capture or any chess feature is banned (the model chooses the move)")
    return None


class _MaskNumbers(ast.NodeTransformer):
    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
            return self.visit_Constant(node.operand)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(value=0), node)
        return node


class _MaskLabels(ast.NodeTransformer):
    """Blanks what names or describes a harness without changing what it does: docstrings and
    the class's `name`, so a renamed harness with a tuned constant is still parameter tuning."""

    def _docstring(self, node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body[0] = ast.Expr(value=ast.Constant(value=""))
        return self.generic_visit(node)

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _docstring

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if [getattr(t, "id", None) for t in node.targets] == ["name"] and isinstance(node.value, ast.Constant):
            node.value = ast.Constant(value="")
        return node


def _only_numbers_changed(parent: str, child: str) -> bool:
    try:
        a, b = ast.parse(parent), ast.parse(child)
    except SyntaxError:
        return False
    a, b = _MaskLabels().visit(a), _MaskLabels().visit(b)
    if ast.dump(a) == ast.dump(b):
        return False  # no number changed: a copy is a duplicate, a new name or docstring alone is no change
    return ast.dump(_MaskNumbers().visit(a)) == ast.dump(_MaskNumbers().visit(b))


RULES: dict[str, DomainRules] = {
    "chess": DomainRules(
        text=("The harness is a communication and validation layer; it must not play chess. Do not import "
              "`chess` or any engine, and implement no search, evaluation, minimax or mate finding.",
              "No move ordering or ranking by check, capture, piece value or any chess feature; the model "
              "chooses the move. Legality may be checked only against the legal moves listed in the "
              "observation the harness was given.",
              "Do not turn a legal wrong move of the model into another move; a legal wrong move is the "
              "model's failure.",
              "Do not hard-code positions (FENs), puzzle ids, solutions, ratings or themes."),
        banned_imports=("chess", "stockfish"),
        banned_words=("lichess", "stockfish", "chess-puzzles", "chess_puzzles"),
        banned_identifiers=r"minimax|negamax|alpha_?beta|quiescence|tablebase|perft|piece_?value|mate_?search",
        no_ranking_by=(r"check", r"captur", r"piece", r"material"), no_ranking_markers=("+", "#", "x")),
    "math": DomainRules(
        text=("The harness may not compute the answer itself (no solving the problem in harness code); it "
              "prompts, parses, routes tool calls and decides when to stop.",),
        banned_words=("gsm8k", "aime", "math500", "numinamath", "deepscaler", "dapo-math", "hendrycks")),
    "searchqa": DomainRules(
        text=("The harness may not answer from its own knowledge or hard-coded facts; answers come from the "
              "model and the retrieval tool.",),
        banned_words=("hotpotqa", "2wikimultihop", "musique", "natural questions", "triviaqa", "popqa",
                      "bamboogle", "nq_open")),
    "toy": DomainRules(text=("The harness may not compute the sum itself; the model (or the calculator tool it "
                             "calls) does.",)),
}


def rules_for(domain: Any) -> DomainRules:
    own = getattr(domain, "proposer_rules", None)
    if isinstance(own, DomainRules):
        return own
    return RULES.get(getattr(domain, "name", ""), DomainRules())
