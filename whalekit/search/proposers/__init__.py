"""Harness proposers: each reads the archive and writes new candidate harnesses behind
one interface, `propose(archive, n, budget) -> list[Candidate]`.

reflective (offline default, seeded), anthropic, openai and claude-code (LLM agents
working in the read-only run view with list/read/grep, a prototyping tool and
write_candidate; their SDKs are imported only when they run), and the prompt-only
restriction for the FST baseline; `make_proposer` builds one by name (`registry.PROPOSERS`).
`cost_report` prices each accepted harness.

    from whalekit.search.proposers import ReflectiveProposer
    candidates = ReflectiveProposer(domain.mechanisms(), seed=0).propose(archive, n=4)
"""

from whalekit.search.proposers.agent_loop import AgentConfig
from whalekit.search.proposers.anthropic_agent import AnthropicProposer
from whalekit.search.proposers.base import Candidate, Proposer, ProposerError
from whalekit.search.proposers.claude_code import ClaudeCodeProposer
from whalekit.search.proposers.ledger import Ledger, cost_report
from whalekit.search.proposers.openai_agent import OpenAIProposer
from whalekit.search.proposers.prompt_only import PromptOnly, prompt_only_violation
from whalekit.search.proposers.prototype import Prototyper, prototype_rollouts
from whalekit.search.proposers.reflective import ReflectiveProposer
from whalekit.search.proposers.registry import PROPOSERS, make_proposer
from whalekit.search.proposers.rules import DomainRules, rules_for
from whalekit.search.proposers.runview import RunView

__all__ = ["AgentConfig", "AnthropicProposer", "Candidate", "ClaudeCodeProposer", "DomainRules", "Ledger",
           "OpenAIProposer", "PROPOSERS", "PromptOnly", "Proposer", "ProposerError", "Prototyper",
           "ReflectiveProposer", "RunView", "cost_report", "make_proposer", "prompt_only_violation",
           "prototype_rollouts", "rules_for"]
