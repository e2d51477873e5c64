"""The v3 audit of the catalogues' declared targets (docs/reproduction-v3.md): every mechanism's
targets plus what the audit found it alters cover the failure modes each hook it edits decides
(the domain's HOOK_FAILURE_MODES), every hook a mechanism edits is in that table, and the v3
proposer weighs what a mechanism alters while the v2 one weighs its declared targets only."""

from __future__ import annotations

import importlib
from collections import Counter

import pytest

from whalekit.domains.base import get_domain
from whalekit.search.proposers.reflective import ReflectiveProposer

DOMAINS = ["math", "searchqa", "chess", "toy"]


def _audit(domain_name: str) -> dict[str, tuple[str, ...]]:
    return importlib.import_module(f"whalekit.domains.{domain_name}.mechanisms").HOOK_FAILURE_MODES


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_each_mechanism_declares_every_failure_mode_its_hooks_decide(domain_name):
    domain = get_domain(domain_name)
    table = _audit(domain_name)
    assert set(mode for modes in table.values() for mode in modes) <= set(domain.failure_modes)
    for mechanism in domain.mechanisms() + domain.prompt_wordings():
        unaudited = mechanism.hooks() - set(table)
        assert not unaudited, f"{mechanism.name}: hooks {sorted(unaudited)} are not in the audit table"
        decided = {mode for hook in mechanism.hooks() for mode in table[hook]}
        missing = decided - set(mechanism.audited_targets())
        assert not missing, f"{mechanism.name} changes {sorted(missing)} but declares neither as target nor alters"
        assert set(mechanism.alters) <= set(domain.failure_modes)


def test_forced_first_search_is_audited_to_alter_retrieval_misses():
    forced = next(m for m in get_domain("searchqa").mechanisms() if m.name == "forced_first_search")
    assert "retrieval_miss" not in forced.targets  # what the v2 records' proposer weighed
    assert "retrieval_miss" in forced.audited_targets()


def test_the_v3_proposer_weighs_what_a_mechanism_alters():
    catalogue = get_domain("searchqa").mechanisms()
    forced = next(m for m in catalogue if m.name == "forced_first_search")
    misses = Counter({"retrieval_miss": 30})
    v2, v3 = ReflectiveProposer(catalogue), ReflectiveProposer(catalogue, weigh_alters=True)
    assert sum(misses[t] for t in v2.weighed_targets(forced)) == 0
    assert sum(misses[t] for t in v3.weighed_targets(forced)) == 30
