"""Domains from outside the package: `wk.register_domain(name, factory)`, and the
`whalekit.domains` entry-point group an installed package declares; either way the domain
is what `get_domain` and `--domain` build."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import whalekit as wk
from whalekit.cli import harness as cli_harness
from whalekit.cli import main as cli
from whalekit.domains import base

PLUGIN = textwrap.dedent('''
    """A word-reversal domain that lives outside whalekit."""
    import random

    from whalekit.domains.base import Domain, Splits, Toolbox, Verdict, split_disjoint
    from whalekit.types import Task

    H0 = """
    from whalekit.harness import FinalAnswer, GenerationSettings, Harness


    class ReverseH0(Harness):
        max_turns = 1

        def system_prompt(self, task):
            return "Reply with the word spelled backwards, nothing else."

        def first_user_message(self, task, initial_results):
            return "Reverse: " + task.inputs["word"]

        def generation_settings(self, state):
            return GenerationSettings(max_new_tokens=8, stop=["\\\\n"])

        def parse(self, reply, state):
            return FinalAnswer(reply.strip())
    """


    class ReverseDomain(Domain):
        name = "reverse"

        def __init__(self, length=4):
            self.length = length

        def load_splits(self, n_train=4, n_search=4, n_test=4, seed=0):
            rng = random.Random(seed)
            words = sorted({"".join(rng.choice("abcdefgh") for _ in range(self.length)) for _ in range(300)})
            tasks = [Task(id="rev-" + w, domain="reverse", inputs={"word": w}, reference=w[::-1]) for w in words]
            return Splits(*split_disjoint(tasks, lambda t: t.id, (n_train, n_search, n_test), seed, "words"))

        def toolbox(self):
            return Toolbox({})

        def verify(self, task, answer):
            correct = (answer or "").strip() == task.reference
            return Verdict(correct, float(correct))

        def initial_harness_source(self):
            return H0


    def broken():
        raise RuntimeError("the plugin is broken")
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin module on sys.path, and an isolated registry."""
    (tmp_path / "reverse_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    yield importlib.import_module("reverse_plugin")
    sys.modules.pop("reverse_plugin", None)


def test_a_registered_domain_is_what_get_domain_builds(plugin):
    wk.register_domain("reverse", plugin.ReverseDomain)
    domain = wk.get_domain("reverse", length=3)
    assert isinstance(domain, plugin.ReverseDomain) and domain.length == 3
    task = domain.load_splits(n_train=1, n_search=1, n_test=1).test[0]
    assert domain.verify(task, task.inputs["word"][::-1]).correct
    assert "reverse" in base.known_domains()
    wk.register_domain("reverse", plugin.ReverseDomain)  # the same factory again is harmless


def test_register_domain_takes_a_callable_or_an_import_path_and_guards_names(plugin):
    wk.register_domain("rev3", lambda **options: plugin.ReverseDomain(length=3, **options))
    wk.register_domain("rev-path", "reverse_plugin:ReverseDomain")
    assert wk.get_domain("rev3").length == 3 and wk.get_domain("rev-path").length == 4
    with pytest.raises(ValueError, match="built-in"):
        wk.register_domain("chess", plugin.ReverseDomain)
    with pytest.raises(ValueError, match="already registered"):
        wk.register_domain("rev3", plugin.ReverseDomain)
    wk.register_domain("rev3", plugin.ReverseDomain, replace=True)
    with pytest.raises(TypeError, match="module:attribute"):
        wk.register_domain("nope", "no colon here")
    wk.register_domain("not-a-domain", dict)
    with pytest.raises(TypeError, match="not a whalekit Domain"):
        wk.get_domain("not-a-domain")


def _declare_entry_points(folder: Path, lines: list[str]) -> None:
    """What `pip install` of a package with [project.entry-points."whalekit.domains"] leaves."""
    info = folder / "reverse_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reverse-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[whalekit.domains]\n" + "\n".join(lines) + "\n")


def test_an_installed_package_declares_a_domain_by_entry_point(plugin, tmp_path):
    _declare_entry_points(tmp_path, ["reverse = reverse_plugin:ReverseDomain", "broken = reverse_plugin:broken",
                                     "missing = reverse_plugin_gone:Domain"])
    assert {"reverse", "broken", "missing"} <= set(base.known_domains())
    assert isinstance(wk.get_domain("reverse"), plugin.ReverseDomain)
    with pytest.raises(RuntimeError, match="the plugin is broken"):
        wk.get_domain("broken")
    with pytest.raises(ValueError, match=r"entry point 'reverse_plugin_gone:Domain'.*failed to load"):
        wk.get_domain("missing")
    with pytest.raises(ValueError, match=r"unknown domain 'nosuch'; known: .*reverse"):
        wk.get_domain("nosuch")


def test_a_registered_domain_runs_through_the_command_line(plugin, tmp_path, capsys, monkeypatch, tiny_policy):
    wk.register_domain("reverse", plugin.ReverseDomain)
    preset = tmp_path / "reverse.yaml"  # a preset of one's own names the new domain
    preset.write_text("model: tiny-random\nsampler: hf\neval_k: 1\ndomains:\n"
                      "  reverse: {n_train: 2, n_search: 2, n_test: 2, domain_options: {length: 3}}\n")
    harness = tmp_path / "h0.py"
    harness.write_text(plugin.H0)
    assert cli.main(["validate", str(harness), "--domain", "reverse", "--preset", str(preset)]) == 0
    assert "dry run passed" in capsys.readouterr().out
    monkeypatch.setattr(cli_harness, "load_policy_for", lambda config: tiny_policy)
    code = cli.main(["eval", "--domain", "reverse", "--harness", str(harness), "--preset", str(preset),
                     "--runs-root", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0 and "reverse (search split, 2 problems x 1 samples" in out and "mean@1: " in out
