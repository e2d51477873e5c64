"""`import whalekit as wk`: every public name resolves to the object its module defines, and
importing the package loads none of the heavy parts until a name that needs them is used."""

from __future__ import annotations

import subprocess
import sys

import whalekit as wk


def test_every_public_name_resolves():
    missing = [name for name in wk.__all__ if getattr(wk, name, None) is None]
    assert missing == []
    from whalekit.run.config import resolve_config
    from whalekit.run.driver import run_method

    assert wk.run_method is run_method and wk.resolve_config is resolve_config


def test_the_rollout_function_is_not_shadowed_by_a_folder():
    """`wk.rollout` is the engine's function; the folder holding the engine is `rollouts/`."""
    import whalekit.rollouts.engine  # noqa: F401  (a loaded folder becomes an attribute of the package)

    assert callable(wk.rollout) and wk.rollout.__module__ == "whalekit.rollouts.engine"


def test_importing_whalekit_loads_no_heavy_dependency():
    code = "import sys, whalekit; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'anthropic') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
