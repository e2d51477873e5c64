"""The prompt-only restriction (the FST baseline): a candidate may differ from its parent
only in the text of its system prompt and first user message.

Why by comparing code: the baseline must not gain parsing, tools or control flow by a
proposer's good will. The check parses both modules: everything outside the two prompt
hooks must be identical (as ASTs, so formatting does not matter), and each prompt hook
must be unchanged or a single `return` of string text (literals, f-strings, `+`) whose
non-literal parts are expressions that already appear in the parent's version of that
hook (or in the base class default). So `"Q: " + task.inputs["question"]` is text, but
computing the answer in `first_user_message` is code, and is rejected.

    restricted = PromptOnly(AnthropicProposer(domain))
    candidates = restricted.propose(archive, n=4)       # violations are archived as invalid
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import TYPE_CHECKING

from whalekit.domains.mechanisms import apply_mechanism
from whalekit.harness import Harness
from whalekit.search.proposers.base import Candidate, Proposer

if TYPE_CHECKING:
    from whalekit.domains.base import Domain
    from whalekit.domains.mechanisms import Mechanism
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive

PROMPT_HOOKS = ("system_prompt", "first_user_message")


def _harness_class(tree: ast.Module) -> ast.ClassDef:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if len(classes) != 1:
        raise ValueError(f"expected one class, found {len(classes)}")
    return classes[0]


def _split(source: str) -> tuple[str, dict[str, ast.FunctionDef]]:
    """The module without its docstrings and prompt hooks (as an AST dump), and the hooks."""
    tree = ast.parse(source)
    cls = _harness_class(tree)
    hooks = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in PROMPT_HOOKS}
    cls.body = [n for n in cls.body if not (isinstance(n, ast.FunctionDef) and n.name in PROMPT_HOOKS)
                and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return ast.dump(tree), hooks


def _default_hook(name: str) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(getattr(Harness, name)))).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _is_text(node: ast.expr, allowed: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None or isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(v, ast.Constant) or (isinstance(v, ast.FormattedValue) and v.format_spec is None
                                                   and ast.dump(v.value) in allowed) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_text(node.left, allowed) and _is_text(node.right, allowed)
    return ast.dump(node) in allowed


def _hook_violation(name: str, parent: ast.FunctionDef, child: ast.FunctionDef) -> str | None:
    if ast.dump(parent.args) != ast.dump(child.args):
        return f"{name}: the arguments changed"
    body = [n for n in child.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if ast.dump(ast.Module(body=body, type_ignores=[])) == ast.dump(ast.Module(
            body=[n for n in parent.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))],
            type_ignores=[])):
        return None
    allowed = {ast.dump(n) for n in ast.walk(parent) if isinstance(n, ast.expr) and not isinstance(n, ast.Constant)}
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None \
            or not _is_text(body[0].value, allowed):
        return (f"{name} may only return text: string literals, f-strings and `+` over expressions "
                f"the parent's {name} already uses")
    return None


def prompt_only_violation(parent_source: str, candidate_source: str) -> str | None:
    """Why `candidate_source` is more than a prompt edit of `parent_source`, or None."""
    try:
        parent_rest, parent_hooks = _split(parent_source)
        child_rest, child_hooks = _split(candidate_source)
    except (SyntaxError, ValueError) as exc:
        return f"prompt-only: cannot compare the sources ({exc})"
    if parent_rest != child_rest:
        return "prompt-only: code outside system_prompt and first_user_message changed"
    for name in PROMPT_HOOKS:
        parent, child = parent_hooks.get(name) or _default_hook(name), child_hooks.get(name) or _default_hook(name)
        problem = _hook_violation(name, parent, child)
        if problem:
            return f"prompt-only: {problem}"
    return None


def prompt_only_catalogue(domain: Domain, initial_source: str | None = None) -> list[Mechanism]:
    """What the offline reflective proposer may try under the restriction: the catalogue's
    mechanisms that are text-only edits of the starting harness's prompt hooks
    (`initial_source`, the domain's h0 when None), then the domain's prompt
    wordings. (Code mechanisms would only be archived as invalid: without wordings an FST
    search has nothing to propose and its budget falls through to training.)"""
    h0 = domain.initial_harness_source() if initial_source is None else initial_source
    out = []
    for mechanism in domain.mechanisms() + domain.prompt_wordings():
        try:
            if prompt_only_violation(h0, apply_mechanism(h0, mechanism)) is None:
                out.append(mechanism)
        except (ValueError, SyntaxError):
            continue
    return out


def check_candidate(candidate: Candidate, archive: Archive) -> str | None:
    if len(candidate.parent_ids) != 1 or candidate.parent_ids[0] not in archive:
        return "prompt-only: a candidate must name exactly one parent in the archive"
    return prompt_only_violation(archive.source(candidate.parent_ids[0]), candidate.source)


class PromptOnly(Proposer):
    """Wraps any proposer; candidates that change code are archived as invalid, with the
    reason (so the proposer reads it next time), and not returned."""

    def __init__(self, inner: Proposer):
        self.inner = inner
        self.name = f"prompt_only({inner.name})"
        if hasattr(inner, "check"):  # agent proposers hear the reason inside write_candidate
            inner.check = check_candidate

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        kept = []
        for candidate in self.inner.propose(archive, n, budget):
            problem = check_candidate(candidate, archive)
            if problem is None:
                kept.append(candidate)
                continue
            cid = archive.add(candidate.source, candidate.parent_ids, candidate.hypothesis,
                              candidate.change_summary, self.name)
            if archive.entry(cid).status == "proposed" and not archive.entry(cid).scores:
                archive.mark_invalid(cid, problem)
        return kept
