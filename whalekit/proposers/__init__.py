"""Harness proposers: each reads the archive and writes new candidate harnesses behind
one interface, `propose(archive, n, budget) -> list[Candidate]`.

reflective (offline default, seeded), anthropic and openai (LLM agents with tools over
the archive; their SDKs are imported only when they run), and the prompt-only
restriction for the FST baseline.

    from whalekit.proposers import ReflectiveProposer
    candidates = ReflectiveProposer(domain.mechanisms(), seed=0).propose(archive, n=4)
"""

from whalekit.proposers.agent_loop import AgentConfig
from whalekit.proposers.anthropic_agent import AnthropicProposer
from whalekit.proposers.base import Candidate, Proposer, ProposerError
from whalekit.proposers.ledger import Ledger
from whalekit.proposers.openai_agent import OpenAIProposer
from whalekit.proposers.prompt_only import PromptOnly, prompt_only_violation
from whalekit.proposers.reflective import ReflectiveProposer

__all__ = ["AgentConfig", "AnthropicProposer", "Candidate", "Ledger", "OpenAIProposer", "PromptOnly", "Proposer",
           "ProposerError", "ReflectiveProposer", "prompt_only_violation"]
