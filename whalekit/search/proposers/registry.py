"""Proposers by name: the `proposer:` config value -> a factory that builds it for a run.
One table, so the names a run accepts and the names an error lists never disagree.

    proposer = make_proposer("reflective", domain, archive, seed=0, options={})
    sorted(PROPOSERS)   # ['anthropic', 'claude-code', 'local', 'openai', 'random-catalogue', 'reflective']
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain
from whalekit.search.archive import Archive
from whalekit.search.proposers.agent_loop import AgentConfig
from whalekit.search.proposers.anthropic_agent import DEFAULT_MODEL as ANTHROPIC_MODEL
from whalekit.search.proposers.anthropic_agent import AnthropicProposer
from whalekit.search.proposers.base import Proposer
from whalekit.search.proposers.claude_code import DEFAULT_MODEL as CLAUDE_CODE_MODEL
from whalekit.search.proposers.claude_code import ClaudeCodeProposer
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.local_coder import LocalCoderConfig, LocalCoderProposer
from whalekit.search.proposers.openai_agent import OpenAIProposer
from whalekit.search.proposers.prompt_only import PromptOnly, prompt_only_catalogue
from whalekit.search.proposers.random_catalogue import RandomCatalogueProposer
from whalekit.search.proposers.reflective import ReflectiveProposer

# options that say how to reach an agent's model, not how the agent works
CONNECTION_OPTIONS = ("api_key", "base_url", "cli_path", "env")

# (domain, archive, seed, options, prompt_only, initial_source: the run's starting harness)
ProposerFactory = Callable[[Domain, Archive, int, dict[str, Any], bool, "str | None"], Proposer]


def _reflective(domain: Domain, archive: Archive, seed: int, options: dict[str, Any], prompt_only: bool,
                initial_source: str | None = None) -> Proposer:
    catalogue = prompt_only_catalogue(domain, initial_source) if prompt_only else domain.mechanisms()
    return ReflectiveProposer(catalogue, seed=seed, **options)


def _local(domain: Domain, archive: Archive, seed: int, options: dict[str, Any], prompt_only: bool,
           initial_source: str | None = None) -> Proposer:
    return LocalCoderProposer(domain, LocalCoderConfig(**options), seed, Ledger.for_archive(archive),
                              Path(archive.root).parent)


def _random_catalogue(domain: Domain, archive: Archive, seed: int, options: dict[str, Any], prompt_only: bool,
                      initial_source: str | None = None) -> Proposer:
    return RandomCatalogueProposer(domain.mechanisms(), seed)


def _agent(build: Callable[[Domain, dict[str, Any], Ledger, dict[str, Any]], Proposer]) -> ProposerFactory:
    """An LLM agent's factory: the connection options go to the client, the rest to its
    AgentConfig; its calls are charged to the archive's ledger."""

    def factory(domain: Domain, archive: Archive, seed: int, options: dict[str, Any], prompt_only: bool,
                initial_source: str | None = None) -> Proposer:
        options = dict(options)
        connection = {k: options.pop(k) for k in CONNECTION_OPTIONS if k in options}
        return build(domain, options, Ledger.for_archive(archive), connection)

    return factory


PROPOSERS: dict[str, ProposerFactory] = {
    "reflective": _reflective,  # offline default: catalogue mechanisms, seeded
    "anthropic": _agent(lambda domain, options, ledger, connection: AnthropicProposer(
        domain, AgentConfig(**{"model": ANTHROPIC_MODEL, **options}), ledger=ledger, **connection)),
    "openai": _agent(lambda domain, options, ledger, connection: OpenAIProposer(
        domain, AgentConfig(**options), ledger=ledger, **connection)),
    "local": _local,  # a small coder model on this machine (llama.cpp), one complete module per request, repaired
    "random-catalogue": _random_catalogue,  # the control: random mechanism sets on the starting harness
    # the paper's own proposer: Claude Code through claude-agent-sdk
    "claude-code": _agent(lambda domain, options, ledger, connection: ClaudeCodeProposer(
        domain, AgentConfig(**{"model": CLAUDE_CODE_MODEL, **options}), ledger=ledger, **connection)),
}


def make_proposer(name: str, domain: Domain, archive: Archive, seed: int, options: dict[str, Any],
                  prompt_only: bool = False, initial_source: str | None = None) -> Proposer:
    """The proposer called `name` (see PROPOSERS), with options from the preset;
    `prompt_only` wraps it in the FST restriction (text-only edits of `initial_source`, the
    run's starting harness; the domain's h0 when None)."""
    if name not in PROPOSERS:
        raise ValueError(f"unknown proposer {name!r}; known: {', '.join(PROPOSERS)}")
    proposer = PROPOSERS[name](domain, archive, seed, options, prompt_only, initial_source)
    return PromptOnly(proposer) if prompt_only else proposer


__all__ = ["CONNECTION_OPTIONS", "PROPOSERS", "ProposerFactory", "make_proposer"]
