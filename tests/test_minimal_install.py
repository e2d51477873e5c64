"""`pip install -e .` without extras is a working whalekit: with every extra's package hidden
(vLLM, llama.cpp, Ray, FAISS, the tracking sinks, claude-agent-sdk, the browser and Jupyter
tools, the test-only TRL), `import whalekit` and a smoke WHALE run on the transformers sampler
work, and a feature that needs an extra says which one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

EXTRAS = ("vllm", "llama_cpp", "ray", "faiss", "tensorboard", "wandb", "mlflow", "claude_agent_sdk", "selenium",
          "jupyterlab", "unsloth", "trl", "datasets")


def _without_extras(code: str, cwd) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter in which the extras cannot be imported (as if absent)."""
    script = f"import sys\nfor name in {EXTRAS!r}:\n    sys.modules[name] = None\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={"WHALEKIT_QUIET": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_whalekit_imports_and_runs_the_smoke_quickstart_without_any_extra(tmp_path):
    done = _without_extras("""
        import whalekit as wk
        from whalekit.samplers.vllm import vllm_available
        assert not vllm_available()  # sampler: auto falls back to transformers
        run = wk.run_method(wk.resolve_config("smoke", domain="toy", method="whale", sampler="auto"))
        assert run.done and run.events("run_end")
        print("finished", run.root)
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished" in done.stdout


def test_a_feature_that_needs_an_extra_names_it(tmp_path):
    done = _without_extras("""
        import whalekit as wk
        for overrides, extra in (({"backend": {"kind": "ray"}}, "[ray]"),
                                 ({"tracking": {"tensorboard": True}}, "[tracking]")):
            try:
                wk.run_method(wk.resolve_config("smoke", domain="toy", method="weight_only", **overrides))
            except ImportError as exc:
                assert extra in str(exc), str(exc)
                print("named", extra)
            else:
                raise AssertionError(f"{overrides} ran without its extra")
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["named", "[ray]", "named", "[tracking]"]
